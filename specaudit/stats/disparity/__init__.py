"""Who gets the speed-up: acceptance, speed-up and latency per prompt group, with uncertainty.

One module per subject (docs/statistics.md explains the methods):

- ``per_prompt``: the per-prompt table every group figure is built from (definitions there);
- ``frame``: ``GroupFrame``, metrics per group with intervals, ratios to a reference, statuses;
- ``intervals``: ratio-to-reference intervals valid at the group sizes used, their status and power;
- ``rank_tests``: Kruskal–Wallis and pairwise rank tests (supporting diagnostics);
- ``drilldown``: acceptance by token rarity and draft position, corrections;
- ``section``: the disparity parts of snapshot.json;
- ``simulate``: synthetic records with a known acceptance structure.

The metric registry lives in ``specaudit.contracts.metrics``.
"""

from specaudit.contracts.metrics import INTERSECTION, METRICS, MetricSpec
from specaudit.stats.disparity.drilldown import DrillDown, drilldown
from specaudit.stats.disparity.frame import GroupFrame
from specaudit.stats.disparity.intervals import RatioInterval, ratio_interval
from specaudit.stats.disparity.per_prompt import _reached_positions, per_prompt_metrics
from specaudit.stats.disparity.rank_tests import (
    RANK_TEST_EFFICIENCY,
    KruskalResult,
    PairwiseResult,
    kruskal_test,
    minimum_detectable_difference,
    pairwise_test,
)
from specaudit.stats.disparity.section import disparity_section
from specaudit.stats.disparity.simulate import simulate_records

__all__ = [
    "INTERSECTION",
    "METRICS",
    "RANK_TEST_EFFICIENCY",
    "DrillDown",
    "GroupFrame",
    "KruskalResult",
    "MetricSpec",
    "PairwiseResult",
    "RatioInterval",
    "_reached_positions",
    "disparity_section",
    "drilldown",
    "kruskal_test",
    "minimum_detectable_difference",
    "pairwise_test",
    "per_prompt_metrics",
    "ratio_interval",
    "simulate_records",
]
