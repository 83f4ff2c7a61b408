"""`specaudit report`: report.html, summary.md, groups.csv and junit.xml from a snapshot."""

from __future__ import annotations

import argparse


def add_report(sub: argparse._SubParsersAction) -> None:
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
    from specaudit.contracts.snapshot import read_snapshot, snapshot_path
    from specaudit.report import render_report

    snapshot = read_snapshot(args.snapshot)
    other = read_snapshot(args.compare) if args.compare else None
    paths = render_report(snapshot, args.out or snapshot_path(args.snapshot).parent, compare=other, compare_label=str(args.compare or ""))
    html = paths["html"]
    print(f"{html} ({html.stat().st_size / 1024:.0f} KiB); also {', '.join(p.name for k, p in paths.items() if k != 'html')}")
    return 0
