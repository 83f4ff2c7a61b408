"""Number and status formatting shared by the HTML report, summary.md and the CLI.

Everything takes a value as the snapshot holds it (a number, None for NaN or not recorded) and
returns text; nothing here raises on an odd value, so an open part of the snapshot (the run's
config, a test's figures) renders whatever it holds.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from specaudit._validation import finite
from specaudit.contracts import CheckStatus, EquivalenceStatus

if TYPE_CHECKING:
    from collections.abc import Callable

    from specaudit.contracts.snapshot import MetricEstimate

MISSING = "—"

# Badge vocabulary of the report, by lower-case key (the key is also the CSS class): the check
# statuses (specaudit.contracts.CheckStatus) plus the states a section can be in.
BADGES = {
    CheckStatus.PASS.lower(): ("PASS", "pass", "✓"),
    CheckStatus.WARN.lower(): ("WARN", "warn", "!"),
    CheckStatus.FAIL.lower(): ("FAIL", "fail", "✗"),
    "error": ("ERROR", "fail", "✗"),
    EquivalenceStatus.NOT_RUN.value: ("NOT RUN", "none", "–"),
}

# Metric families: the per-group tables are split by family so each fits a printed page.
METRIC_FAMILIES = {
    "Acceptance": ("acceptance_rate", "per_position_acceptance", "mean_accepted_tokens", "mean_beta"),
    "Speed and latency": (
        "speedup",
        "tokens_per_s",
        "vanilla_tokens_per_s",
        "ttft_s",
        "latency_per_token_p50_s",
        "latency_per_token_p95_s",
        "cost_ratio",
    ),
}

METRIC_LABELS = {
    "acceptance_rate": "acceptance rate",
    "per_position_acceptance": "per-position acceptance",
    "mean_accepted_tokens": "tokens per step (τ)",
    "mean_beta": "mean β (theoretical acceptance)",
    "speedup": "speed-up",
    "tokens_per_s": "tokens/s (speculative)",
    "vanilla_tokens_per_s": "tokens/s (vanilla)",
    "ttft_s": "time to first token (s)",
    "latency_per_token_p50_s": "latency per token p50 (s)",
    "latency_per_token_p95_s": "latency per token p95 (s)",
    "cost_ratio": "draft/target cost ratio c",
}

TEST_LABELS = {
    "pit": "PIT uniformity (Anderson–Darling)",
    "pit_ks": "PIT uniformity (Kolmogorov–Smirnov)",
    "step_pit": "PIT per step role (Anderson–Darling)",
    "surprisal": "surprisal martingale (z)",
    "draft_affinity": "draft affinity (z)",
    "acceptance": "acceptance calibration (z)",
    "impossible_tokens": "impossible tokens (count)",
    "first_token": "first-token distribution",
    "length": "output length",
    "loglik": "sequence log-likelihood",
    "ngram": "n-gram frequencies",
    "mmd": "MMD (Hamming kernel)",
}


def recorded(value: Any, otherwise: Any = MISSING) -> Any:
    """A value as the run recorded it; null (or absent) is not recorded."""
    return otherwise if value is None else value


def num(value: Any, digits: int = 3) -> str:
    """Significant digits for measurements of any scale (0.00384, 281.7, 2.16)."""
    if not finite(value):
        return MISSING
    if isinstance(value, int):
        return f"{value:,}"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= digits:
        return f"{value:,.0f}"
    decimals = max(0, digits - 1 - magnitude)
    return f"{value:.{decimals}f}"


def setting(value: Any) -> str:
    """A user-chosen setting (α, δ, a threshold) as the user would write it: 0.05, not 0.0500."""
    return f"{value:g}" if finite(value) else MISSING


def visible(text: Any) -> str:
    """Token strings with their whitespace and control characters made visible (a newline token
    would otherwise vanish from a table cell)."""
    out = []
    for ch in str(text):
        if ch == "\n":
            out.append("↵")
        elif ch == "\t":
            out.append("→")
        elif ch == "\r":
            out.append("␍")
        elif ord(ch) < 32 or 127 <= ord(ch) < 160:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def fixed(value: Any, decimals: int = 2) -> str:
    return f"{value:.{decimals}f}" if finite(value) else MISSING


def integer(value: Any) -> str:
    return f"{int(value):,}" if finite(value) else MISSING


def pvalue(value: Any) -> str:
    if not finite(value):
        return MISSING
    if value < 0.001:
        return "<0.001"
    return f"{value:.3f}"


def percent(value: Any, decimals: int = 0) -> str:
    return f"{100 * value:.{decimals}f}%" if finite(value) else MISSING


def with_ci(value: Any, low: Any, high: Any, fmt: Callable[[Any], str] = num, suffix: str = "") -> str:
    """'0.310 [0.288, 0.333]' (the interval is left out when unknown)."""
    if not finite(value):
        return MISSING
    text = f"{fmt(value)}{suffix}"
    if finite(low) and finite(high):
        text += f" [{fmt(low)}, {fmt(high)}]"
    return text


def triple(block: MetricEstimate | None, fmt: Callable[[Any], str] = num, suffix: str = "") -> str:
    """An estimate with its interval as text (MISSING where there is none)."""
    if block is None:
        return MISSING
    return with_ci(block.value, block.ci_low, block.ci_high, fmt=fmt, suffix=suffix)


def metric_label(metric: str) -> str:
    return METRIC_LABELS.get(metric, str(metric).replace("_", " "))


def test_label(name: str) -> str:
    return TEST_LABELS.get(name, str(name).replace("_", " "))


def is_status(value: Any, status: CheckStatus) -> bool:
    """Whether a snapshot value is this check status, in whatever case the snapshot spelt it."""
    try:
        return value is not None and CheckStatus.parse(value) is status
    except ValueError:
        return False


def badge(status: Any) -> dict[str, str]:
    """Text, CSS class and symbol of a status; unknown statuses show as 'not run'."""
    key = str(status).lower() if status is not None else "not run"
    key = {"skipped": "not run", "pending": "not run"}.get(key, key)
    text, css, symbol = BADGES.get(key, BADGES["not run"])
    return {"text": text, "css": css, "symbol": symbol, "key": key if key in BADGES else "not run"}


def worst(statuses: list[str]) -> str:
    order = {"pass": 0, "not run": 0, "warn": 1, "fail": 2, "error": 3}
    present = [s for s in statuses if s in order and s != "not run"]
    if not present:
        return "not run"
    return max(present, key=order.__getitem__)


def bytes_text(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"
