"""One engine's equivalence status, from the battery, the two-sample tests and the TV bound.

``specaudit.contracts.EquivalenceStatus``: VIOLATION when a test rejected (or an impossible token
was emitted); EQUIVALENT when the TV upper bound is at most δ; NO_VIOLATION_FOUND when tests ran,
none rejected, and no bound is below δ; NOT_RUN when no test that could reject was run. A test
that cannot reject is never read as evidence of equivalence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from specaudit.contracts import EquivalenceStatus
from specaudit.contracts.snapshot import parse_verdict, spelt
from specaudit.stats._results import FAIL, PASS

__all__ = ["engine_status"]


def _get(result: Any, name: str) -> Any:
    return result.get(name) if isinstance(result, Mapping) else getattr(result, name, None)


def engine_status(verdicts: Mapping[str, Any], bound: Any = None, delta: float | None = None) -> tuple[EquivalenceStatus, str]:
    """The status and a one-line reason, from the verdicts of the tests that were run (name →
    PASS/FAIL/"skipped"/"not run" in any case, or a result with a ``verdict``) and an optional TV
    bound (``TVBound`` or its dict)."""
    results = {name: v for name, v in verdicts.items() if v is not None}
    verdicts = {name: spelt(v if isinstance(v, str) else _get(v, "verdict"), parse_verdict) for name, v in results.items()}
    rejected = [name for name, v in verdicts.items() if v == FAIL]
    if rejected:
        return EquivalenceStatus.VIOLATION, f"rejected by {', '.join(rejected)}"
    upper = _get(bound, "upper") if bound is not None else None
    margin = delta if delta is not None else (_get(bound, "delta") if bound is not None else None)
    ran = [name for name, v in verdicts.items() if v == PASS]
    if upper is not None and margin is not None and math.isfinite(upper) and upper <= margin:
        position = _get(bound, "position")
        return EquivalenceStatus.EQUIVALENT, f"TV upper bound {upper:.3g} ≤ δ = {margin:g} at output position {position}"
    if ran:
        why = (
            f"TV upper bound {upper:.3g} > δ = {margin:g}"
            if upper is not None and margin is not None and math.isfinite(upper)
            else "no TV bound"
        )
        return EquivalenceStatus.NO_VIOLATION_FOUND, f"{', '.join(ran)} ran and did not reject; {why}, so equivalence is not shown"
    not_run = [f"{name}: {(None if isinstance(r, str) else _get(r, 'not_run_reason')) or verdicts[name]}" for name, r in results.items()]
    return EquivalenceStatus.NOT_RUN, "no test that could reject was run: " + (", ".join(not_run) or "none")
