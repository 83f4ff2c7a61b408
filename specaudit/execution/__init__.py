"""The run folder and the one run loop: what every engine's executor runs inside.

    plan.py       PlanItem generation (interleaving, timing repeats) and derive_seed
    folder.py     RunFolder: prompts, output checks, lock, resume check, manifest, writer, summary
    base.py       the Executor interface and `execute`, the one run loop
    records.py    records.jsonl and manifest.json: reading, checking, appending
    merge.py      --shard i/N and merging shard folders
    preflight.py  checks of a run's inputs against each other before anything decodes

The executors themselves are engines (specaudit.engines). (A package named `specaudit.run` would
replace the public function `specaudit.run` whenever it is imported, so the package has this name.)
"""

from __future__ import annotations

from specaudit.execution.base import Executor, execute
from specaudit.execution.folder import RunFolder, RunSummary

__all__ = ["Executor", "RunFolder", "RunSummary", "execute"]
