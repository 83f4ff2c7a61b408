"""Concurrency (and the prompt cache's state) as dimensions of the plan, for the executors that
serve requests (endpoint, llama-server).

Every (prompt, sample) is decoded once per level, as its own sample label (level i of L takes
samples i*S .. i*S+S-1 for --samples S, so each level has its own seeds and the plan's pairs stay
paired), and the record says at which level it ran (`concurrency`). The levels run one after
another, in the order given; within one, `level` requests are in flight at a time on each server, so
at level 4 a batching server holds up to 4 sequences of one side in its batch. Records are
written in plan order within a level.

`--prefix-cache cold,warm` adds the cache state as a second dimension: the plan runs once per
(level, state) pass, each pass its own block of sample labels as above, level-major (a level's cold
pass, then its warm pass), and the record says its state (contracts.run.PREFIX_CACHE_FIELD). With
one state and no levels the labels are the plan's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from specaudit._validation import typed_as
from specaudit.contracts.run import PlanItem, Record
from specaudit.engines.ordered import emit_in_plan_order
from specaudit.errors import InputError

if TYPE_CHECKING:
    from specaudit.execution.folder import RunFolder


def check_levels(levels: Sequence[int], setting: str) -> tuple[int, ...]:
    """The levels as given, or an InputError naming `setting` as the user gave it (_validation.typed_as)."""
    levels, setting = tuple(levels), typed_as(setting)
    if not levels or any(not isinstance(c, int) or isinstance(c, bool) or c < 1 for c in levels):
        raise InputError(f"{setting} must be integers >= 1, got {list(levels)}")
    if len(set(levels)) != len(levels):
        raise InputError(f"{setting} has a level twice: {list(levels)}")
    return levels


Pass = tuple[int | None, str | None]  # (concurrency level or None: one pass without levels, cache state or None)


def pass_plan(
    plan: list[PlanItem], levels: Sequence[int | None], states: Sequence[str | None], samples: int, timing_repeats: int
) -> list[tuple[Pass, PlanItem]]:
    """The plan once per (level, state) pass, level-major: (pass, item) with the item's sample
    relabelled into that pass's block (outputs i*samples + s, timing repeats t(i*R + r))."""
    expanded = []
    passes = [(level, state) for level in levels for state in states]
    for index, one in enumerate(passes):
        for item in plan:
            if item.timing_only:
                label: int | str = f"t{index * timing_repeats + int(str(item.sample)[1:])}"
            else:
                label = index * samples + int(item.sample)
            expanded.append((one, PlanItem(item.prompt, item.engine, label, item.timing_only)))
    return expanded


def level_plan(plan: list[PlanItem], levels: tuple[int, ...], samples: int, timing_repeats: int) -> list[tuple[int, PlanItem]]:
    """The plan once per concurrency level, level-major: (level, item) with the item's sample
    relabelled into that level's block (outputs i*samples + s, timing repeats t(i*R + r))."""
    return [(level, item) for (level, _), item in pass_plan(plan, levels, (None,), samples, timing_repeats)]


def plan_passes(
    folder: RunFolder, levels: Sequence[int | None], states: Sequence[str | None], samples: int, timing_repeats: int
) -> dict[str, Pass]:
    """Replace the folder's plan by its per-pass expansion (what is recorded already is skipped)
    and return each item key's (level, state)."""
    expanded = pass_plan(folder.plan, levels, states, samples, timing_repeats)
    folder.plan = [item for _, item in expanded]
    folder.todo = [item for item in folder.plan if item.key not in folder.done]
    return {item.key: one for one, item in expanded}


def plan_levels(folder: RunFolder, levels: tuple[int, ...], samples: int, timing_repeats: int) -> dict[str, int]:
    """Replace the folder's plan by its per-level expansion (what is recorded already is skipped)
    and return each item key's level."""
    return {key: level for key, (level, _) in plan_passes(folder, levels, (None,), samples, timing_repeats).items()}


def cache_states(states: tuple[str, ...] | None) -> tuple[str | None, ...]:
    """The passes' cache states of a run's `prefix_cache` (None: one pass, no state recorded)."""
    return tuple(states) if states else (None,)


def run_levels(
    items: list[PlanItem],
    levels: tuple[int, ...],
    level_of: dict[str, int],
    record_of: Callable[[PlanItem], Record],
    emit: Callable[[Record], None],
) -> None:
    """Each level's items in turn, in the order given (see `run_level`)."""
    for level in levels:
        batch = [item for item in items if level_of[item.key] == level]
        if batch:
            run_level(batch, level, record_of, emit)


def run_level(items: list[PlanItem], level: int, record_of: Callable[[PlanItem], Record], emit: Callable[[Record], None]) -> None:
    """`items` with `level` requests in flight at a time per engine (one pool of `level` workers
    for each side, both at once, so the two sides of a pair run at the same load); finished
    records are written in plan order, and what finished is kept on an error."""
    engines = sorted({item.engine for item in items})
    pools = {engine: ThreadPoolExecutor(max_workers=level) for engine in engines}
    try:
        futures = {pools[item.engine].submit(record_of, item): index for index, item in enumerate(items)}
        emit_in_plan_order(futures, emit)
    finally:
        for pool in pools.values():
            pool.shutdown(wait=True)


__all__ = ["cache_states", "check_levels", "level_plan", "pass_plan", "plan_levels", "plan_passes", "run_level", "run_levels"]
