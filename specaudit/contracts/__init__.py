"""The contracts between stages, defined once (docs/ARCHITECTURE.md, "Contracts").

Every stage imports its shared vocabulary from here: the statuses a check or a comparison can
have, the default tolerance band, and (as the run and snapshot contracts are typed) Record,
PlanItem and Snapshot. Nothing in this package imports another specaudit module, so any module
may import it without making a circle.
"""

from specaudit.contracts.metrics import INTERSECTION, METRICS, MetricSpec, group_label
from specaudit.contracts.status import (
    DEFAULT_BAND,
    MIN_CHECKED_PROMPTS,
    CheckStatus,
    DisparityStatus,
    EquivalenceStatus,
    worst,
)

__all__ = [
    "DEFAULT_BAND",
    "INTERSECTION",
    "MIN_CHECKED_PROMPTS",
    "METRICS",
    "CheckStatus",
    "DisparityStatus",
    "EquivalenceStatus",
    "MetricSpec",
    "group_label",
    "worst",
]
