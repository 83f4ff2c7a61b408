"""A screen record (engine "screen"): a target sample and the speculative counts expected along it,
written by the screen (engines/screen) and by a backend that screens beside its own engines
(`--engines screen,llama-cpp`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specaudit.decoding import Generation
from specaudit.engines.decode import make_record

if TYPE_CHECKING:
    from specaudit.config import RunConfig
    from specaudit.contracts.run import PlanItem, Record
    from specaudit.stats.acceptance import PathAcceptance
    from specaudit.stats.shape_screen import ShapeCounts


@dataclass
class ScreenedPath:
    """One row of the screen: a target sample and the speculative counts expected along it."""

    tokens: list[int]
    finish_reason: str
    acceptance: PathAcceptance
    batch_s: float  # wall time of the row's batch (sampling + draft pass), shared by its rows
    batch_rows: int
    tree: ShapeCounts | None = None  # with a tree shape asked for: the tree's expected counts along the path


def screen_record(cfg: RunConfig, item: PlanItem, seed: int, prompt_ids: list[int], path: ScreenedPath, text: str) -> Record:
    acceptance = path.acceptance
    generation = Generation(
        tokens=path.tokens,
        finish_reason=path.finish_reason,
        wall_s=math.nan,
        ttft_s=math.nan,
        steps=acceptance.steps,
        proposed=acceptance.proposed,
        accepted=acceptance.accepted,
        accepted_per_step=acceptance.accepted_per_step,
        proposed_per_step=acceptance.proposed_per_step,
    )
    record = make_record(cfg, item, seed, prompt_ids, generation, text)
    row_s = path.batch_s / path.batch_rows
    counts = "exact" if acceptance.accepted_per_step else "expected"
    record = record.replace(wall_s=None, ttft_s=None).with_extra(
        expected_reached=acceptance.reached,
        position_beta=acceptance.beta,
        position_accept=acceptance.accept_cond,
        screen={"batch_rows": path.batch_rows, "batch_s": path.batch_s, "row_s": row_s, "counts": counts},
    )
    if path.tree is None:
        return record
    # the tree's expected [numerator, denominator] of each figure stats.shape_acceptance reports
    shape = {"tokens_per_step": [path.tree.tokens, path.tree.steps]}
    shape |= {f"depth_{d + 1}": [a, r] for d, (a, r) in enumerate(zip(path.tree.accepted_at, path.tree.reached_at))}
    return record.with_extra(tree_expected=shape)
