"""The metric registry: every group metric the audit reports, defined once.

Each metric has a name, a direction (is a higher value better for the group?), a unit and a
family (acceptance, speed, latency, cost), plus how it is formed from the per-prompt table that
``specaudit.stats.disparity.per_prompt_metrics`` builds: ratio metrics combine group sums of
per-prompt columns, quantile metrics take a quantile of one per-prompt column. Gate, report,
monitor and statistics read direction and unit from here rather than keeping their own lists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

# Intersections of prompt attributes are keyed and labelled "domain×dialect" everywhere.
INTERSECTION = "×"


def group_label(group: object) -> str:
    """How a group is named in tables and JSON: its value, or its values joined by × for an
    intersection (a tuple)."""
    return INTERSECTION.join(str(g) for g in group) if isinstance(group, tuple) else str(group)


Direction = Literal["higher", "lower"]
Family = Literal["acceptance", "speed", "latency", "cost"]


@dataclass(frozen=True)
class MetricSpec:
    """How a group metric is formed from per-prompt columns, and how to read it.

    Ratio metrics: ``combine`` of the group sums of ``sums`` (columns of the per-prompt table,
    taken only over prompts where ``value_column`` is defined). Quantile metrics: the
    ``quantile`` of ``value_column`` over the group's prompts. ``value_column`` is also the
    per-prompt value that tests and intervals compare.
    """

    name: str
    description: str
    value_column: str
    token_column: str
    sums: tuple[str, ...] = ()
    combine: Callable[..., object] | None = None
    quantile: float | None = None
    direction: Direction = "higher"
    unit: str = ""
    family: Family = "acceptance"

    @property
    def higher_is_better(self) -> bool:
        return self.direction == "higher"


def _ratio(a: float, b: float) -> float:
    return a / b


METRICS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in [
        MetricSpec(
            "acceptance_rate",
            "accepted / proposed draft tokens",
            "acceptance_rate",
            "n_tokens",
            ("accepted", "proposed"),
            _ratio,
            unit="fraction",
            family="acceptance",
        ),
        MetricSpec(
            "per_position_acceptance",
            "accepted / drafted positions reached (the formula's α)",
            "per_position_acceptance",
            "n_tokens",
            ("accepted", "reached"),
            _ratio,
            unit="fraction",
            family="acceptance",
        ),
        MetricSpec(
            "mean_accepted_tokens",
            "tokens emitted per verification step (Spec-Bench MAT)",
            "mean_accepted_tokens",
            "n_tokens",
            ("accepted", "steps"),
            lambda a, s: (a + s) / s,
            unit="tokens/step",
            family="acceptance",
        ),
        MetricSpec(
            "mean_beta",
            "mean β = Σ min(p, q) per drafted position",
            "mean_beta",
            "n_tokens",
            ("beta_sum", "beta_n"),
            _ratio,
            unit="probability",
            family="acceptance",
        ),
        MetricSpec(
            "speedup",
            "vanilla / speculative time per output token, paired per prompt",
            "speedup",
            "latency_tokens",
            ("vanilla_latency_per_token_s", "latency_per_token_s"),
            _ratio,
            unit="×",
            family="speed",
        ),
        MetricSpec(
            "tokens_per_s",
            "output tokens per second of the audited engine",
            "tokens_per_s",
            "latency_tokens",
            ("latency_tokens", "latency_wall_s"),
            _ratio,
            unit="tokens/s",
            family="speed",
        ),
        MetricSpec(
            "vanilla_tokens_per_s",
            "output tokens per second of vanilla decoding",
            "vanilla_tokens_per_s",
            "vanilla_tokens",
            ("vanilla_tokens", "vanilla_wall_s"),
            _ratio,
            unit="tokens/s",
            family="speed",
        ),
        MetricSpec(
            "ttft_s",
            "mean time to first token",
            "ttft_s",
            "latency_tokens",
            ("ttft_s", "one"),
            _ratio,
            direction="lower",
            unit="s",
            family="latency",
        ),
        MetricSpec(
            "latency_per_token_p50_s",
            "median over prompts of time per output token",
            "latency_per_token_s",
            "latency_tokens",
            quantile=0.5,
            direction="lower",
            unit="s/token",
            family="latency",
        ),
        MetricSpec(
            "latency_per_token_p95_s",
            "95th percentile over prompts of time per output token",
            "latency_per_token_s",
            "latency_tokens",
            quantile=0.95,
            direction="lower",
            unit="s/token",
            family="latency",
        ),
        MetricSpec(
            "cost_ratio",
            "draft forward time / target verification time (c)",
            "cost_ratio",
            "latency_tokens",
            ("draft_s", "latency_proposed", "verify_s", "latency_steps"),
            lambda d, p, v, s: (d / p) / (v / s),
            direction="lower",
            unit="ratio",
            family="cost",
        ),
    ]
}
