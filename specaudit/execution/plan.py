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

from specaudit.contracts.run import SCREEN_ENGINE, PlanItem

if TYPE_CHECKING:
    from specaudit.config import RunConfig
    from specaudit.prompts import PromptSet

SEED_DERIVATION = "sha256(run_seed|prompt_id|sample)[:8], little-endian, 63 bits"  # written into manifest.json


def derive_seed(run_seed: int, prompt_id: str, sample: int | str) -> int:
    """A per-(prompt, sample) seed that does not depend on the order or subset of the plan: both
    engines of a pair, and any process or shard that decodes the item, use the same one."""
    digest = hashlib.sha256(f"{run_seed}|{prompt_id}|{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def plan_items(
    prompts: Iterable, cfg: RunConfig, engines: Sequence[str] | None = None, engine_subset: set[str] | None = None
) -> list[PlanItem]:
    """Every item of the plan in execution order; `engines` defaults to cfg's (a backend passes
    the record engines it produces, ("vanilla", "speculative")). With the screen in the run, the
    screen covers every prompt and the other engines only the prompt ids in `engine_subset`."""
    engines = tuple(engines or cfg.engines)
    screened = SCREEN_ENGINE in engines
    decoders = tuple(e for e in engines if e != SCREEN_ENGINE)
    items = []
    for prompt in prompts:
        if screened:
            items.extend(PlanItem(prompt, SCREEN_ENGINE, s) for s in range(cfg.samples))
        if screened and (engine_subset is None or prompt.id not in engine_subset):
            continue
        labels = [(s, False) for s in range(cfg.samples)] + [(f"t{r}", True) for r in range(cfg.timing_repeats)]
        for position, (label, timing_only) in enumerate(labels):
            order = decoders if position % 2 == 0 else tuple(reversed(decoders))
            items.extend(PlanItem(prompt, engine, label, timing_only) for engine in order)
    return items


def engine_subset(prompt_set: PromptSet, cfg: RunConfig) -> set[str]:
    """The screened prompts the engines also decode: one per group of every dimension (whole pairs,
    drawn with the run's sample seed, so a parallel pair keeps every group's version), capped at
    `cfg.engine_prompts` by a seeded draw. The engines' jobs (exactness, paired timings that
    validate the cost model) need tokens and a spread of acceptance, not every prompt."""
    import warnings

    import numpy as np

    from specaudit.prompts import PromptSetWarning
    from specaudit.prompts._select import stratified_sample

    prompts = list(prompt_set.prompts)
    strata = list(cfg.dimensions or prompt_set.dimensions or [])
    if strata:
        with warnings.catch_warnings():  # a group smaller than one prompt cannot be; short pairs are fine here
            warnings.simplefilter("ignore", PromptSetWarning)
            prompts = stratified_sample(prompts, strata, 1, cfg.sample_seed, prompt_set.dimensions)
    ids = [p.id for p in prompts]
    if cfg.engine_prompts is not None and len(ids) > cfg.engine_prompts:
        keep = np.random.default_rng([cfg.sample_seed, 1]).permutation(len(ids))[: cfg.engine_prompts]
        ids = [ids[i] for i in sorted(keep)]
    return set(ids)


def shard_of(prompt_id: str, count: int) -> int:
    """The shard (of `count`) a prompt belongs to: a stable hash of its id alone, so all engines and
    samples of a prompt land in the same shard and its paired timings stay on one machine."""
    return int.from_bytes(hashlib.sha256(prompt_id.encode()).digest()[:8], "little") % count


def shard_prompts(prompts: Sequence, shard: tuple[int, int] | None) -> list:
    """The prompts of shard i of N (`shard=(i, N)`, see specaudit.execution.merge); all of them without one."""
    if shard is None:
        return list(prompts)
    return [p for p in prompts if shard_of(p.id, shard[1]) == shard[0]]
