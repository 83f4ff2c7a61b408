"""The runner's public face: `run` and the helpers other modules and scripts import.

The run loop, the plan and the executors live in specaudit.execution (docs/ARCHITECTURE.md,
"The run package"); this module re-exports them under their long-standing names.
"""

from __future__ import annotations

from specaudit.execution import RunSummary, run
from specaudit.execution.decode import (
    decode_item,
    device_entry,
    eos_token_ids,
    generate_one,
    library_versions,
    load_pair_for,
    make_record,
    warm_up,
)
from specaudit.execution.plan import derive_seed, plan_items

__all__ = [
    "RunSummary",
    "decode_item",
    "derive_seed",
    "device_entry",
    "eos_token_ids",
    "generate_one",
    "library_versions",
    "load_pair_for",
    "make_record",
    "plan_items",
    "run",
    "warm_up",
]
