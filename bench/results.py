"""The table of committed runs in docs/results.md, regenerated from the runs themselves.

Each folder under reports/ that holds a snapshot.json becomes one row: the command it ran, when it
ran (the snapshot's own date), the commit that last changed the folder and that commit's date, and
its headline counts read from the snapshot (prompts, records, equivalence, the group comparisons'
statuses, the gate). `python bench/results.py` rewrites the table between the markers in
docs/results.md; `--check` exits 1 when the table there differs (tests/test_docs_site.py)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results.md"
BEGIN, END = "<!-- committed-runs:begin (bench/results.py) -->", "<!-- committed-runs:end -->"
STATUSES = ("FLAG", "WITHIN", "INCONCLUSIVE", "INSUFFICIENT")


def comparison_statuses(snapshot: dict) -> Counter:
    """How many group comparisons (every metric's pairwise entries) have each disparity status."""
    counts: Counter = Counter()
    for dimension in (snapshot.get("disparities") or {}).values():
        for metric in (dimension.get("metrics") or {}).values():
            for comparison in (metric.get("pairwise") or {}).values():
                if comparison.get("status"):
                    counts[comparison["status"]] += 1
    return counts


def last_commit(folder: Path) -> tuple[str, str]:
    """(short hash, date) of the commit that last changed `folder`, or ("-", "-") outside git."""
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%h %cs", "--", str(folder.relative_to(ROOT))],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return "-", "-"
    return (out[0], out[1]) if len(out) == 2 else ("-", "-")


def row(folder: Path) -> str:
    snapshot = json.loads((folder / "snapshot.json").read_text(encoding="utf-8"))
    run = snapshot.get("run") or {}
    gate = snapshot.get("gate") or {}
    counts = comparison_statuses(snapshot)
    comparisons = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) or "none"
    gate_counts = gate.get("counts") or {}
    gate_text = f"{gate.get('status', '-')} ({', '.join(f'{n} {k}' for k, n in gate_counts.items())})" if gate else "-"
    commit, date = last_commit(folder)
    cells = [
        f"`{folder.relative_to(ROOT)}/`",
        f"`{run.get('command', '-')}`",
        str(run.get("created", "-"))[:10],
        f"{commit} ({date})",
        str(run.get("n_prompts", "-")),
        str(run.get("n_records", "-")),
        str((snapshot.get("equivalence") or {}).get("status", "-")),
        comparisons,
        gate_text,
    ]
    return "| " + " | ".join(cells) + " |"


def table() -> str:
    folders = sorted(path.parent for path in (ROOT / "reports").rglob("snapshot.json"))
    header = [
        "| run | command | ran | committed | prompts | records | equivalence | group comparisons | gate |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    return "\n".join([*header, *(row(folder) for folder in folders)])


def rewritten(text: str) -> str:
    before, _, rest = text.partition(BEGIN)
    _, _, after = rest.partition(END)
    return f"{before}{BEGIN}\n{table()}\n{END}{after}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/results.md's table is not current")
    args = parser.parse_args()
    text = RESULTS.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        print(f"{RESULTS}: the markers {BEGIN} and {END} are missing", file=sys.stderr)
        return 2
    new = rewritten(text)
    if args.check:
        if new != text:
            print("docs/results.md: the committed-runs table is not current; run `python bench/results.py`", file=sys.stderr)
            return 1
        return 0
    RESULTS.write_text(new, encoding="utf-8")
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
