"""The gate's thresholds (`GateThresholds`, `load_thresholds`) and its check statuses."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from specaudit.errors import InputError

PASS, WARN, FAIL = "pass", "warn", "fail"
SEVERITIES = (WARN, FAIL)
DISPARITY_METRICS = ("acceptance_rate", "speedup")


@dataclass(frozen=True)
class GateThresholds:
    """What the gate demands. ``None`` means "what the analysis used" (its α, δ and band).

    - ``alpha``: family-wise level for the equivalence battery and the disparity tests (Holm).
    - ``tv_delta``: the equivalence margin δ on total variation; the TV upper bound must be ≤ δ.
    - ``band_low`` / ``band_high``: tolerance band on a group's ratio to the reference group;
      with only ``band_low`` given, ``band_high`` = 1 / ``band_low`` (Aequitas' τ ≤ r ≤ 1/τ).
    - ``disparity_metrics``: metrics whose ratios are gated (from the snapshot's pairwise tests).
    - ``min_speedup``: each group's measured speed-up should reach this (1.0: not slowed down).
    - ``min_group_size``: groups with fewer prompts give unreliable intervals and tests.
    - ``*_severity``: "warn" or "fail" for a check that is not met.
    """

    alpha: float | None = None
    tv_delta: float | None = None
    band_low: float | None = None
    band_high: float | None = None
    disparity_metrics: tuple[str, ...] = DISPARITY_METRICS
    disparity_severity: str = FAIL
    tv_severity: str = WARN
    min_speedup: float = 1.0
    slowdown_severity: str = WARN
    min_group_size: int = 20

    def __post_init__(self) -> None:
        _check_number("alpha", self.alpha, low=0.0, high=1.0, allow_none=True, explain="the family-wise error rate, e.g. 0.05")
        _check_number(
            "tv_delta", self.tv_delta, low=0.0, high=1.0, allow_none=True, explain="the equivalence margin on total variation, e.g. 0.05"
        )
        _check_number(
            "band_low",
            self.band_low,
            low=0.0,
            high=1.0,
            high_inclusive=True,
            allow_none=True,
            explain="the lowest acceptable ratio of a group to the reference, e.g. 0.8",
        )
        _check_number(
            "band_high",
            self.band_high,
            low=1.0,
            high=math.inf,
            low_inclusive=True,
            allow_none=True,
            explain="the highest acceptable ratio of a group to the reference, e.g. 1.25",
        )
        _check_number("min_speedup", self.min_speedup, low=0.0, high=math.inf, explain="the speed-up every group should reach, e.g. 1.0")
        if isinstance(self.min_group_size, bool) or not isinstance(self.min_group_size, int) or self.min_group_size < 1:
            raise InputError(f"gate.min_group_size must be an integer >= 1, got {self.min_group_size!r}")
        for name in ("disparity_severity", "tv_severity", "slowdown_severity"):
            value = getattr(self, name)
            if value not in SEVERITIES:
                raise InputError(f"gate.{name} must be 'warn' or 'fail', got {value!r}")
        metrics = self.disparity_metrics
        if isinstance(metrics, str):
            metrics = tuple(m.strip() for m in metrics.split(",") if m.strip())
        if not isinstance(metrics, (list, tuple)) or not metrics or not all(isinstance(m, str) and m for m in metrics):
            raise InputError(
                f"gate.disparity_metrics must be a non-empty list of metric names such as acceptance_rate, speedup; got {self.disparity_metrics!r}"
            )
        object.__setattr__(self, "disparity_metrics", tuple(metrics))

    def band(self, analysis_band: Any = None) -> tuple[float, float]:
        """The band in force: the gate's own, else the analysis's, else the four-fifths rule."""
        if self.band_low is not None:
            return self.band_low, self.band_high if self.band_high is not None else 1.0 / self.band_low
        low, high = 0.8, 1.25
        if isinstance(analysis_band, (list, tuple)) and len(analysis_band) == 2 and all(finite(x) for x in analysis_band):
            low, high = float(analysis_band[0]), float(analysis_band[1])
        return low, self.band_high if self.band_high is not None else high

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["disparity_metrics"] = list(self.disparity_metrics)
        return out


def _check_number(name, value, *, low, high, allow_none=False, low_inclusive=False, high_inclusive=False, explain=""):
    if value is None and allow_none:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value >= low if low_inclusive else value > low) and (value <= high if high_inclusive else value < high)
    if not ok:
        left = "[" if low_inclusive else "("
        right = "]" if high_inclusive else ")"
        upper = "∞" if math.isinf(high) else f"{high:g}"
        raise InputError(f"gate.{name} must be a number in {left}{low:g}, {upper}{right}, got {value!r} ({explain})")


def load_thresholds(source: str | Path | Mapping[str, Any] | None = None) -> GateThresholds:
    """Thresholds from a YAML config's ``gate:`` section (a path), or from a mapping (either the
    whole config with a ``gate`` key or the gate section itself). ``None`` gives the defaults."""
    if source is None:
        return GateThresholds()
    where = "gate thresholds"
    if isinstance(source, (str, Path)):
        from specaudit.config import load_config_file

        where = f"config file {source}"
        options = load_config_file(source)
        _refuse_unknown_sections(options, where)
        section = options.get("gate", {})
    elif isinstance(source, Mapping):
        section = source["gate"] if "gate" in source else source
    else:
        raise InputError(f"gate thresholds must come from a YAML file or a mapping, got {type(source).__name__}")
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise InputError(f"{where}: the gate section must be a mapping of threshold: value, got {type(section).__name__}")
    section = {str(k).replace("-", "_"): v for k, v in section.items()}
    known = {f.name for f in fields(GateThresholds)}
    unknown = sorted(set(section) - known)
    if unknown:
        raise InputError(f"{where}: unknown gate setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    try:
        return GateThresholds(**section)
    except InputError as err:
        raise InputError(f"{where}: {err}") from None


def _refuse_unknown_sections(options: Mapping[str, Any], where: str) -> None:
    """A gate config is an audit config (run options, `analysis:`, `gate:`): a misspelt `gate:`
    would otherwise leave the default thresholds in force without a word."""
    from specaudit.config import RUN_OPTIONS

    known = set(RUN_OPTIONS) | {"out", "analysis", "gate"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(
            f"{where}: unknown top-level key(s) {', '.join(unknown)}; the thresholds go under `gate:` "
            "(beside the audit's run options and `analysis:`)"
        )


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
