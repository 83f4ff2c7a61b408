"""What a recommended rerun costs, from the audit's own fitted cost model (specaudit.stats.cost_model).

The snapshot holds, for every screened prompt, the cost model's predicted speculative time per
output token (`tokens_per_s`) and its predicted speed-up over vanilla; one sample of a prompt
therefore costs n_tokens / tokens_per_s seconds speculative and `speedup` times that vanilla.
The engines decode the cost model's timed subset (`speed.cost_model.n_prompts` prompts) with
`samples` samples each, so their part of an audit is predicted as samples x that many prompts x
the mean per-sample time over the screened prompts. The screen and the analysis come on top, from
this audit's measured times (`run.stage_seconds`, `run.analysis.seconds`) scaled to the rerun.
A rerun predicted over BUDGET_HOURS is not recommended (the report says what the audit showed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specaudit.contracts.run import SCREEN_ENGINE
from specaudit.contracts.snapshot import RunConfigBlock, StageSeconds
from specaudit.report.view.format import finite

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import Snapshot


def engine_seconds_per_sample(snapshot: Snapshot, speedup: float | None = None) -> float | None:
    """Predicted seconds of one vanilla + one speculative sample of the engines' prompts, summed
    over those prompts; None when the snapshot has no cost model. With `speedup`, the speculative
    engine runs at that speed-up over vanilla instead of each prompt's predicted one (the cost
    model's expected speed-up at another draft length k)."""
    prompts = snapshot.prompts
    n_engine = _engine_prompts(snapshot)
    if snapshot.speed is None or snapshot.speed.source != "cost model" or not finite(n_engine) or not prompts:
        return None
    per_prompt = []
    for row in prompts:
        # a prompt row's value columns are its extras (numbers or null, checked by the contract)
        tokens, rate, predicted = (getattr(row, key, None) for key in ("n_tokens", "tokens_per_s", "speedup"))
        if finite(tokens) and finite(rate) and finite(predicted) and rate > 0:
            vanilla = tokens / rate * predicted  # speculative seconds x speed-up
            per_prompt.append(vanilla * (1.0 + 1.0 / (speedup if finite(speedup) and speedup > 0 else predicted)))
    if not per_prompt:
        return None
    return float(n_engine) * sum(per_prompt) / len(per_prompt)


def duration(seconds: float) -> str:
    """3 min, 1.4 h, 2.1 days: a rerun's cost at the precision a prediction has."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


BUDGET_HOURS = 24.0  # no rerun predicted to take longer is recommended: the report says what the audit showed instead


@dataclass(frozen=True)
class RerunCost:
    """A rerun's predicted time in seconds by stage: the engines (the cost model, or their measured
    time scaled), the screen and the analysis (this audit's measured times, scaled by the prompts and
    samples each stage handles); `screen` or `analysis` is None where this audit recorded none."""

    engines: float
    screen: float | None
    analysis: float | None
    what: str  # the rerun, e.g. "30,928 samples on each of 44 prompts"

    @property
    def total(self) -> float:
        return self.engines + (self.screen or 0.0) + (self.analysis or 0.0)

    @property
    def over_budget(self) -> bool:
        return self.total > BUDGET_HOURS * 3600

    def sentence(self) -> str:
        parts = [f"engines {duration(self.engines)}"]
        parts.append(f"screen {duration(self.screen)}" if self.screen is not None else "the screen's time was not recorded")
        parts.append(f"analysis {duration(self.analysis)}" if self.analysis is not None else "analysis not timed")
        budget = f", over the {BUDGET_HOURS:g} h budget" if self.over_budget else ""
        return f"Predicted cost on this hardware: about {duration(self.total)}{budget} ({self.what}; {', '.join(parts)})."


def _measured(seconds: float | None) -> float | None:
    return seconds if finite(seconds) else None


def _engine_prompts(snapshot: Snapshot) -> Any:
    """The prompts the engines decoded: the cost model's timed subset (None without a cost model)."""
    fit = snapshot.speed.cost_model if snapshot.speed is not None else None
    return fit.n_prompts if fit is not None else None


def predicted_rerun(
    snapshot: Snapshot,
    *,
    samples: int | None = None,
    prompts: int | None = None,
    per_group: int | None = None,
    speedup: float | None = None,
    why: str = "",
) -> RerunCost | None:
    """The predicted time of this audit rerun with `samples` per prompt (default its own), the engines
    on `prompts` of their prompts (default all), `per_group` screened prompts per group (default its
    own) and the speculative engine at `speedup`; None without a cost model or measured engine time.

    Engines: samples x prompts x the cost model's mean per-sample time (`engine_seconds_per_sample`),
    or their measured time scaled where no cost model was fitted. Screen: its measured time x the
    ratio of samples x the ratio of prompts per group (every screened prompt is sampled `samples`
    times). Analysis: its measured time x the ratio of engine records it scores."""
    config = snapshot.run.config or RunConfigBlock()
    current = config.samples or 1
    samples = samples or current
    n_engine = _engine_prompts(snapshot)
    per_sample = engine_seconds_per_sample(snapshot, speedup)
    stages = snapshot.run.stage_seconds or StageSeconds()
    measured_engines = _measured(stages.engines)
    if per_sample is not None and math.isfinite(per_sample) and finite(n_engine):
        share = min(prompts, int(n_engine)) / int(n_engine) if prompts else 1.0
        engines = samples * per_sample * share
        engine_prompts = prompts or int(n_engine)
    elif measured_engines:
        engines, engine_prompts = measured_engines * samples / current, prompts
    else:
        return None
    group_ratio = per_group / float(config.per_group) if per_group and finite(config.per_group) else 1.0
    screen_now = _measured(stages.screen)
    screen = screen_now * samples / current * group_ratio if screen_now is not None else None
    analysis_now = snapshot.run.analysis.seconds if snapshot.run.analysis is not None else None
    n_records, n_screen = snapshot.run.n_records, _screened_records(snapshot)
    analysis = None
    if finite(analysis_now) and finite(n_records) and n_records > n_screen:
        # scoring the engines' records dominates (the screen's carry their own numbers and are not scored)
        analysis = analysis_now * (samples / current) * ((min(prompts, n_engine) / n_engine) if prompts and finite(n_engine) else 1.0)
    what = f"{samples:,} sample(s) on each of {engine_prompts} engine prompts" if engine_prompts else f"{samples:,} sample(s) per prompt"
    if per_group:
        what += f", {per_group} prompts per group screened"
    return RerunCost(engines, screen, analysis, what + why)


def _screened_records(snapshot: Snapshot) -> int:
    """Records of the screen: every screened prompt x samples (0 without a screen)."""
    if SCREEN_ENGINE not in snapshot.run.engines:
        return 0
    return int(snapshot.run.n_prompts or 0) * ((snapshot.run.config or RunConfigBlock()).samples or 1)


def samples_cost(snapshot: Snapshot, samples: int, *, prompts: int | None = None) -> str | None:
    """'Predicted cost: ...' for a rerun with `samples` samples per prompt (on `prompts` of the
    engines' prompts, default all), or None without a cost model."""
    cost = predicted_rerun(snapshot, samples=samples, prompts=prompts)
    return cost.sentence() if cost else None


def rerun_cost(snapshot: Snapshot, *, speedup: float | None = None, why: str = "", per_group: int | None = None) -> str | None:
    """'Predicted cost: ...' for rerunning this audit at its own budget (another seed, a fixed
    setup) or with `per_group` prompts per group, the speculative engine at `speedup` when given."""
    cost = predicted_rerun(snapshot, speedup=speedup, why=why, per_group=per_group)
    return cost.sentence() if cost else None


def best_k_speedup(snapshot: Snapshot, k: int) -> float | None:
    """The cost model's expected speed-up at draft length `k`, averaged over the groups whose
    best k it is (snapshot recommendations); None if no group recommends it."""
    values = []
    for part in snapshot.recommendations.values():
        for row in part.by_group.values():
            if row.best_k == k and finite(row.best_k_expected_speedup):
                values.append(float(row.best_k_expected_speedup))
    return sum(values) / len(values) if values else None
