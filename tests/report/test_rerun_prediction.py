"""A recommended rerun's predicted cost, checked against the rerun itself (tiny models): every
stage the prediction names (the screen, the engines, the analysis) is predicted from this audit's
own measured times, so a rerun with three times the samples takes about what was predicted."""

from __future__ import annotations

import time
import warnings

import pytest

from specaudit.contracts.snapshot import read_snapshot, snapshot_document
from specaudit.report.view.costs import BUDGET_HOURS, RerunCost, predicted_rerun


def _audit(tiny_pair_dir, prompts_file, out, samples):
    """run (screen, vanilla, speculative) then analyze; the screen one row per batch, so its time
    grows with rows as a real model's full batches do (a tiny model's batch costs the same at 4 rows or 12)."""
    from specaudit.analysis import analyze
    from specaudit.config import RunConfig
    from specaudit.engines import run

    target, draft = tiny_pair_dir
    cfg = RunConfig(
        target=str(target),
        draft=str(draft),
        engines="screen,vanilla,speculative",
        samples=samples,
        max_new_tokens=16,
        prompts=str(prompts_file),
        device="cpu",
        extra={"screen_batch": 1},
    )
    started = time.perf_counter()
    with warnings.catch_warnings():  # groups of 2 prompts: the loader warns that groups are small
        warnings.simplefilter("ignore")
        run(cfg, out, progress=False)
    snapshot = snapshot_document(analyze(out, n_boot=100))
    return snapshot, time.perf_counter() - started


@pytest.mark.slow
def test_predicted_rerun_scales_the_measured_stages(tiny_pair_dir, tiny_prompts_file, tmp_path):
    # Wall-time ratios against a rerun are a benchmark's job (tests hold no timed assertions); here the
    # prediction must be built from the stages the run measured, the screen and analysis included.
    first, wall = _audit(tiny_pair_dir, tiny_prompts_file, tmp_path / "first", 1)
    stages = first["run"]["stage_seconds"]
    assert set(stages) == {"screen", "engines"} and stages["screen"] > 0
    assert stages["screen"] + stages["engines"] <= wall  # model loading comes on top of what any stage measures
    predicted = predicted_rerun(read_snapshot(first), samples=3)
    assert predicted is not None and predicted.screen == pytest.approx(3 * stages["screen"])
    assert predicted.analysis == pytest.approx(3 * first["run"]["analysis"]["seconds"])
    assert predicted.total == pytest.approx(predicted.engines + predicted.screen + predicted.analysis)


def test_a_rerun_over_the_budget_says_so():
    cost = RerunCost(engines=20 * 3600, screen=3 * 3600, analysis=2 * 3600, what="2 samples")
    assert cost.over_budget and cost.total == 25 * 3600
    assert f"over the {BUDGET_HOURS:g} h budget" in cost.sentence() and "screen 3.0 h" in cost.sentence()
    assert not RerunCost(engines=60, screen=None, analysis=30, what="x").over_budget
    assert "the screen's time was not recorded" in RerunCost(engines=60, screen=None, analysis=30, what="x").sentence()
