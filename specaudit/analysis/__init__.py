"""Analysis: a run folder (records.jsonl + manifest.json) -> snapshot.json.

The snapshot is the one contract that report, gate and monitor read (docs/ARCHITECTURE.md,
Contracts). This package only composes: the statistics live in specaudit.stats.

    snapshot.py      `analyze`: read the run, build every section, validate, write
    equivalence.py   the equivalence section: scoring, the battery per engine, the control's judgement
"""

from specaudit.analysis.snapshot import analyze

__all__ = ["analyze"]
