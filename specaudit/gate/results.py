"""A gate check and the gate's result, with the small helpers every check uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specaudit._validation import finite
from specaudit.contracts import CheckStatus, worst
from specaudit.contracts.snapshot import plain_data
from specaudit.gate.thresholds import FAIL, PASS, WARN, GateThresholds

# The report's decisions (the rule is gate.decision's); here so a result can name its own.
DECISIONS = {
    "enable": "Enable",
    "conditions": "Enable with conditions",
    "do_not": "Do not enable",
    "insufficient": "Insufficient evidence",
}
DECISIONS_WORST_FIRST = ("do_not", "insufficient", "conditions", "enable")
BLOCKING = ("do_not", "insufficient")  # the decisions that do not allow enabling
# `fail_on` (--fail-on): the decisions each policy exits 1 on, besides a failing check (which makes
# the decision Do not enable anyway); "do-not-enable" is the default of `audit` and `gate` alike.
EXIT_ON = {"fail": (), "do-not-enable": ("do_not",), "decision": BLOCKING}


def fail_on_for(decision: str) -> str:
    """The least strict --fail-on policy that exits 1 on `decision`."""
    return next(policy for policy, decisions in EXIT_ON.items() if decision in decisions)


def decision_line(decision: str, exit_code: int) -> str:
    """The last line of `audit`: the decision and the exit code that follows it, naming the flag
    that would exit 1 where the decision does not allow enabling and the exit code is 0."""
    hint = f"; --fail-on {fail_on_for(decision)} exits 1 on it" if decision in BLOCKING and exit_code == 0 else ""
    return f"decision: {DECISIONS[decision]}  (exit {exit_code}{hint})"


# ============================================================================ results
@dataclass(frozen=True)
class GateCheck:
    """One check: ``name`` is stable across runs (a JUnit test case), ``message`` says why."""

    name: str
    title: str
    status: CheckStatus
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "status": self.status, "message": self.message, "details": plain_data(self.details)}


@dataclass(frozen=True)
class GateResult:
    checks: tuple[GateCheck, ...]
    thresholds: GateThresholds
    decision: str | None = None  # the report's decision (a DECISIONS key)

    @property
    def disagreement(self) -> str | None:
        """One sentence where the decision blocks enabling but the exit code is 0, naming the fix."""
        if self.decision not in BLOCKING or self.exit_code != 0:
            return None
        return (
            f"the decision is {DECISIONS[self.decision]} but the gate exits 0 (--fail-on {self.thresholds.fail_on}); "
            f"pass --fail-on {fail_on_for(self.decision)} (or `fail_on: {fail_on_for(self.decision)}` under gate:) to exit 1 on this decision"
        )

    @property
    def status(self) -> CheckStatus:
        return worst(c.status for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0: pass (warnings allowed), 1: at least one check failed (the `decision` check included,
        which fails where the decision is one `fail_on` exits on)."""
        return 1 if self.status == FAIL else 0

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.checks) for s in (PASS, WARN, FAIL)}

    def to_dict(self) -> dict[str, Any]:
        """The snapshot's ``gate`` section."""
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "counts": self.counts,
            "thresholds": self.thresholds.to_dict(),
            "checks": [c.to_dict() for c in self.checks],
            **({"decision": self.decision} if self.decision else {}),
            **({"disagreement": self.disagreement} if self.disagreement else {}),
        }

    def format(self) -> str:
        """Plain text for a terminal: one line per check, then the verdict."""
        width = max((len(c.name) for c in self.checks), default=0)
        lines = [f"{c.status.upper():4}  {c.name:<{width}}  {c.message}" for c in self.checks]
        c = self.counts
        lines.append(f"gate: {self.status.upper()} ({c[PASS]} pass, {c[WARN]} warn, {c[FAIL]} fail)")
        if self.disagreement:
            lines.append(f"note: {self.disagreement}")
        return "\n".join(lines)


def fmt(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}g}" if finite(value) else "n/a"


def fixed(value: Any) -> str:
    """Ratios and speed-ups: two decimals read better than significant digits (0.31, 1.00)."""
    return f"{value:.2f}" if finite(value) else "n/a"


def section_check(name: str, title: str, section: Any, message: str, shown: tuple[str, ...]) -> GateCheck:
    """A check that states a snapshot section's own verdict: FAIL where the section failed, PASS
    otherwise, with the section's `shown` fields as its details."""
    return GateCheck(name, title, FAIL if section.status == FAIL else PASS, message, {key: getattr(section, key) for key in shown})


def not_run(name: str, title: str, what: str) -> GateCheck:
    return GateCheck(name, title, WARN, f"not run: {what}", {"not_run": True})
