"""Statuses: what a check, a group comparison or the equivalence battery may conclude.

Three vocabularies, one per question, so that a label never claims more than its test shows:

- CheckStatus: a gate or monitor check (PASS / WARN / FAIL; exit code 1 only on FAIL).
- DisparityStatus: a group's ratio to its reference, judged by its confidence interval against
  the tolerance band: FLAG (interval wholly outside the band), WITHIN (wholly inside: parity
  shown), INCONCLUSIVE (straddles a band edge), INSUFFICIENT (this design cannot decide; the
  comparison carries the minimum detectable ratio instead).
- EquivalenceStatus: VIOLATION (a test rejected, or an impossible token), EQUIVALENT (an upper
  bound on the distance below delta), NO_VIOLATION_FOUND (nothing rejected, no bound below
  delta), NOT_RUN (no test that could reject was run; the reason travels beside it).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

# The four-fifths convention (and its reciprocal): a group's ratio to the reference inside
# [0.8, 1.25] counts as parity.
DEFAULT_BAND: tuple[float, float] = (0.8, 1.25)

# The checked group size: the fewest prompts a run audited in a group at which the ratio interval's tails were measured to hold their level
# (Welch–Fieller at 4 prompts a side on skewed per-prompt values; docs/statistics.md). Below it a
# group's interval is unchecked and analysis and gate warn; above it, what a group's size buys is
# its comparison's status and minimum detectable ratio, not a fixed count.
MIN_CHECKED_PROMPTS = 4


class _Status(StrEnum):
    @classmethod
    def parse(cls, value: str) -> _Status:
        """Read a status from JSON, case-insensitively (snapshots written before this type said "pass")."""
        text = str(value).strip().upper().replace("_", " ")
        for member in cls:
            if member.value.upper() == text or member.name.replace("_", " ") == text:
                return member
        raise ValueError(f"{value!r} is not a {cls.__name__} ({', '.join(m.value for m in cls)})")


class CheckStatus(_Status):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"

    @property
    def rank(self) -> int:
        return ("PASS", "WARN", "FAIL").index(self.value)


class DisparityStatus(_Status):
    FLAG = "FLAG"
    WITHIN = "WITHIN"
    INCONCLUSIVE = "INCONCLUSIVE"
    INSUFFICIENT = "INSUFFICIENT"

    @classmethod
    def from_interval(cls, low: float, high: float, band: tuple[float, float] = DEFAULT_BAND, *, decidable: bool = True) -> DisparityStatus:
        """The status of a ratio whose confidence interval is [low, high]."""
        if not decidable or not (low == low and high == high):  # NaN: no interval
            return cls.INSUFFICIENT
        if high < band[0] or low > band[1]:
            return cls.FLAG
        if band[0] <= low and high <= band[1]:
            return cls.WITHIN
        return cls.INCONCLUSIVE


class EquivalenceStatus(_Status):
    VIOLATION = "violation"
    EQUIVALENT = "equivalent within delta"
    NO_VIOLATION_FOUND = "no violation found"
    NOT_RUN = "not run"


def worst(statuses: Iterable[str]) -> CheckStatus:
    """The gate's status: its worst check (PASS when there are none)."""
    return max((CheckStatus.parse(s) for s in statuses), key=lambda s: s.rank, default=CheckStatus.PASS)
