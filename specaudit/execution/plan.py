"""The plan of a run: every prompt × sample × engine as a PlanItem, in execution order.

Engines of one prompt and sample run back to back, in alternating order (the first engine first
on even samples, last on odd ones), so that slow drift of the machine affects both sides of each
paired speed-up alike. `timing_repeats` R adds R more interleaved items per prompt, marked
`timing_only`: latency statistics use them, output statistics ignore them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from specaudit.contracts.run import PlanItem

if TYPE_CHECKING:
    from specaudit.config import RunConfig

SEED_DERIVATION = "sha256(run_seed|prompt_id|sample)[:8], little-endian, 63 bits"  # written into manifest.json


def derive_seed(run_seed: int, prompt_id: str, sample: int | str) -> int:
    """A per-(prompt, sample) seed that does not depend on the order or subset of the plan: both
    engines of a pair, and any process or shard that decodes the item, use the same one."""
    digest = hashlib.sha256(f"{run_seed}|{prompt_id}|{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def plan_items(prompts: Iterable, cfg: RunConfig, engines: Sequence[str] | None = None) -> list[PlanItem]:
    """Every item of the plan in execution order; `engines` defaults to cfg's (a backend passes
    the record engines it produces, ("vanilla", "speculative"))."""
    engines = tuple(engines or cfg.engines)
    items = []
    for prompt in prompts:
        labels = [(s, False) for s in range(cfg.samples)] + [(f"t{r}", True) for r in range(cfg.timing_repeats)]
        for position, (label, timing_only) in enumerate(labels):
            order = engines if position % 2 == 0 else tuple(reversed(engines))
            items.extend(PlanItem(prompt, engine, label, timing_only) for engine in order)
    return items


def shard_of(prompt_id: str, count: int) -> int:
    """The shard (of `count`) a prompt belongs to: a stable hash of its id alone, so all engines and
    samples of a prompt land in the same shard and its paired timings stay on one machine."""
    return int.from_bytes(hashlib.sha256(prompt_id.encode()).digest()[:8], "little") % count


def shard_prompts(prompts: Sequence, shard: tuple[int, int] | None) -> list:
    """The prompts of shard i of N (`shard=(i, N)`, see specaudit.shards); all of them without one."""
    if shard is None:
        return list(prompts)
    return [p for p in prompts if shard_of(p.id, shard[1]) == shard[0]]
