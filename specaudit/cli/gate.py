"""`specaudit gate`: judge a snapshot against thresholds; exit 1 where a check fails (the decision
check included: by default it fails on Do not enable, as `audit`), else 0."""

from __future__ import annotations

import argparse


def add_gate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gate", help="judge a snapshot against thresholds: exit 1 on a failing check or the decision Do not enable (--fail-on), else 0"
    )
    p.add_argument("snapshot", metavar="RUN_DIR|SNAPSHOT", help="run folder holding snapshot.json, or the snapshot file")
    p.add_argument("--config", help="YAML config whose `gate:` section holds the thresholds (default thresholds otherwise)")
    p.add_argument("--write", action="store_true", help="store the verdict in the snapshot's `gate` section")
    from specaudit.cli.run import add_fail_on

    add_fail_on(p)
    p.set_defaults(func=cmd_gate)


def cmd_gate(args: argparse.Namespace) -> int:
    from specaudit._files import write_json_atomic
    from specaudit.contracts.snapshot import load_snapshot_and_view, snapshot_path
    from specaudit.gate import evaluate_gate, load_thresholds

    snapshot, typed = load_snapshot_and_view(args.snapshot)  # the file as read (written back with --write), validated once
    thresholds = load_thresholds(args.config) if args.config else load_thresholds()
    if args.fail_on:
        thresholds = thresholds.model_copy(update={"fail_on": args.fail_on})
    result = evaluate_gate(typed, thresholds)
    print(result.format())
    if args.write:
        snapshot["gate"] = result.to_dict()
        write_json_atomic(snapshot_path(args.snapshot), snapshot)
    return result.exit_code
