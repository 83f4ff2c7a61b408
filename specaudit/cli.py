"""Command line: one thin function per subcommand. Parsing only; the work lives in the package."""

from __future__ import annotations

import argparse
import sys
import warnings

from specaudit._cli.mitigate import add_mitigate
from specaudit._cli.monitor import add_monitor
from specaudit._cli.prompts import add_prompts
from specaudit._cli.run import add_analyze, add_audit, add_merge, add_run
from specaudit.errors import InputError


# ---------------------------------------------------------------------- selftest
def _add_selftest(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("selftest", help="the auditor audits itself: false alarms of the correct sampler, detection of mutants")
    p.add_argument(
        "--quick",
        action="store_true",
        help="fewer seeds (unit 10, end-to-end 3); a mutant the quick budget cannot reach is reported, not failed",
    )
    p.add_argument("--seeds", type=int, help="seeds per sampler for the unit audit (default 200)")
    p.add_argument("--e2e-seeds", type=int, help="seeds per sampler for the end-to-end audit (default 20)")
    p.add_argument("--target", default="tiny", help="end-to-end pair: tiny (random 2-layer models, default) or a target such as default")
    p.add_argument("--draft", default="int8", help="draft for a non-tiny end-to-end target (default int8)")
    p.add_argument("--samplers", help="comma list of samplers (default: correct and every mutant)")
    p.add_argument("--skip-e2e", action="store_true", help="only the unit audit")
    p.add_argument(
        "--sampling",
        nargs="+",
        metavar="SETTING",
        help="end-to-end sampling settings, each run for every sampler: greedy, t=0.7,top_p=0.9, t=1,top_k=50 (default t=1)",
    )
    p.set_defaults(func=cmd_selftest)


def cmd_selftest(args: argparse.Namespace) -> int:
    import tempfile

    import pandas as pd

    from specaudit.decoding.settings import parse_settings
    from specaudit.selftest import MUTANTS
    from specaudit.selftest.end_to_end import e2e_samplers, end_to_end_selftest
    from specaudit.selftest.harness import unit_selftest

    for flag, value in (("--seeds", args.seeds), ("--e2e-seeds", args.e2e_seeds)):
        if value is not None and value < 1:
            raise InputError(f"{flag} must be an integer >= 1, got {value}")
    everything = e2e_samplers()
    samplers = [s.strip() for s in args.samplers.split(",") if s.strip()] if args.samplers is not None else list(everything)
    if not samplers:
        raise InputError(f"--samplers names no sampler; give a comma list from {', '.join(everything)}, or leave it out for all")
    unknown = [s for s in samplers if s not in everything]
    if unknown:
        raise InputError(f"unknown sampler(s) {', '.join(unknown)}; choose from {', '.join(everything)}")
    settings = parse_settings(args.sampling or ["t=1"])
    pd.set_option("display.width", 200)
    unit_seeds = range(args.seeds) if args.seeds is not None else None
    unit = None
    in_unit = [s for s in samplers if s in MUTANTS]  # field mutants need the engine's logits
    if in_unit:
        unit = unit_selftest(seeds=unit_seeds, quick=args.quick, samplers=in_unit)
        print("unit audit (audit_sampler on (p, q) families):")
        print(unit.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    e2e = None
    if not args.skip_e2e:
        from specaudit.models import load_pair, save_tiny_pair
        from specaudit.prompts import load_prompts

        with tempfile.TemporaryDirectory() as folder:
            if args.target == "tiny":
                target, draft = save_tiny_pair(folder)
                pair = load_pair(str(target), str(draft), device="cpu")
            else:
                pair = load_pair(args.target, args.draft)
            prompts = load_prompts("core", dimensions=["domain"], per_group=1, seed=0)
            seeds = range(args.e2e_seeds if args.e2e_seeds is not None else (3 if args.quick else 20))
            e2e = pd.concat(
                [end_to_end_selftest(pair, prompts, samplers=samplers, seeds=seeds, spec=spec, quick=args.quick) for spec in settings],
                ignore_index=True,
            )
        print(f"\nend to end (mutant inside the speculative engine, full analysis; target {args.target}):")
        print(e2e.drop(columns="expected", errors="ignore").to_string(index=False, float_format=lambda x: f"{x:.3g}"))
        unexpected = e2e[~e2e.get("expected", pd.Series("caught", index=e2e.index)).isin(["caught", "calibrated"])]
        if len(unexpected):
            print("\nnot required to be caught here (a row's target says what it is held to instead):")
            for row in unexpected.itertuples():
                print(f"  {row.sampler} at {row.sampling}: {row.expected}")
    # The exit code covers every part that ran: a row of either table that missed its target fails it.
    missed = [
        f"{part} {name}"
        for part, table in (("unit", unit), ("end-to-end", e2e))
        if table is not None
        for name in table.loc[~table["ok"].astype(bool), "sampler"]
    ]
    if missed:
        print(f"\nselftest failed: {', '.join(missed)} missed the target", file=sys.stderr)
    return 1 if missed else 0


# ------------------------------------------------------------------------ report
def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="render report.html, summary.md, groups.csv and junit.xml from a snapshot")
    p.add_argument("snapshot", metavar="RUN_DIR|SNAPSHOT", help="run folder holding snapshot.json, or the snapshot file")
    p.add_argument("--out", help="folder for the report files (default: beside snapshot.json)")
    p.add_argument(
        "--compare",
        metavar="OTHER",
        help="another run folder or snapshot: show per group what changed against it (the monitor's drift tests)",
    )
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from specaudit.contracts.snapshot import load_snapshot, snapshot_path
    from specaudit.report import render_report

    snapshot = load_snapshot(args.snapshot)
    other = load_snapshot(args.compare) if args.compare else None
    paths = render_report(snapshot, args.out or snapshot_path(args.snapshot).parent, compare=other, compare_label=str(args.compare or ""))
    html = paths["html"]
    print(f"{html} ({html.stat().st_size / 1024:.0f} KiB); also {', '.join(p.name for k, p in paths.items() if k != 'html')}")
    return 0


# -------------------------------------------------------------------------- gate
def _add_gate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gate", help="judge a snapshot against thresholds: exit 0 pass (warnings allowed), 1 fail")
    p.add_argument("snapshot", metavar="RUN_DIR|SNAPSHOT", help="run folder holding snapshot.json, or the snapshot file")
    p.add_argument("--config", help="YAML config whose `gate:` section holds the thresholds (default thresholds otherwise)")
    p.add_argument("--write", action="store_true", help="store the verdict in the snapshot's `gate` section")
    p.set_defaults(func=cmd_gate)


def cmd_gate(args: argparse.Namespace) -> int:
    from specaudit.contracts.snapshot import load_snapshot, snapshot_path
    from specaudit.gate import evaluate_gate, load_thresholds
    from specaudit.records import write_json_atomic

    snapshot = load_snapshot(args.snapshot)
    result = evaluate_gate(snapshot, load_thresholds(args.config) if args.config else None)
    print(result.format())
    if args.write:
        snapshot["gate"] = result.to_dict()
        write_json_atomic(snapshot_path(args.snapshot), snapshot)
    return result.exit_code


# -------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specaudit",
        description="Audit speculative decoding for correctness and fairness.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add_run(sub)
    add_merge(sub)
    add_analyze(sub)
    add_audit(sub)
    _add_selftest(sub)
    add_mitigate(sub)
    add_prompts(sub)
    _add_report(sub)
    _add_gate(sub)
    add_monitor(sub)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> str:
    return f"specaudit: warning: {message}\n"


# Exit codes, one meaning each: scripts and CI tell "the gate failed" from "the tool broke".
EXIT_PASS = 0
EXIT_FAILED = 1  # a gate, monitor check or self-test failed
EXIT_BAD_INPUT = 2  # bad input or usage (argparse uses 2 as well)
EXIT_INTERNAL_ERROR = 70  # EX_SOFTWARE: an unexpected error, a bug of specaudit
EXIT_INTERRUPTED = 130


def _internal_error(command: str, err: BaseException) -> int:
    """One line for an unexpected error; the traceback only when SPECAUDIT_DEBUG asks for it."""
    import os
    import traceback

    if os.environ.get("SPECAUDIT_DEBUG"):
        traceback.print_exc()
    what = " ".join(str(err).split())[:300]
    print(
        f"specaudit: internal error: `specaudit {command}` failed with {type(err).__name__}: {what}; this is a bug of "
        "specaudit, please report it with the command and the traceback that SPECAUDIT_DEBUG=1 prints",
        file=sys.stderr,
    )
    return EXIT_INTERNAL_ERROR


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse itself exits 2 on bad flags
    warnings.formatwarning = _one_line_warning  # users get sentences, not source lines
    try:
        return int(args.func(args) or 0)
    except InputError as err:
        print(f"specaudit: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # output piped into `head`: not an error of ours
        sys.stderr.close()
        return EXIT_PASS
    except KeyboardInterrupt:
        print("specaudit: interrupted; completed records are kept, re-run to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as err:
        if err.filename is None:
            return _internal_error(args.command, err)
        # The system refused a file the user named or holds (full disk, read-only folder): their
        # environment, not a bug, and the stage writes atomically, so nothing is half-written.
        print(f"specaudit: error: cannot use {err.filename}: {err.strerror or err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as err:  # noqa: BLE001 (anything else is our bug: exit 70, never 1, the code of a failed gate)
        return _internal_error(args.command, err)


if __name__ == "__main__":
    sys.exit(main())
