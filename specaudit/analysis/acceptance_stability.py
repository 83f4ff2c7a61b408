"""The snapshot's acceptance stability section: does speculation keep working under load and over
the server's life? A run at concurrency levels whose speculative records carry the server's own
per-request counts (`proposed`, `accepted`) is checked for two failures that leave the output
right, so that no equivalence test can see them, and that only an acceptance monitor does:

- collapse under load: accepted drafts per output token at a level, over the same at the lowest
  level (a ratio of pooled sums, prompt-cluster bootstrap interval, prompts paired). The level
  collapses when the interval lies wholly below the band's lower edge (0.8 by default): a correct
  server's acceptance does not depend on what else is in the batch, so the ratio's interval holds 1.
- stopped during the run: ordered by when each request left (`started_at`), the speculative
  requests from some point on drafted nothing at all, at least MIN_STOPPED of them and a tenth of
  the run, where earlier ones drafted, within one level (a stop that comes with a change of level
  is the load's), and the same prompts drafted before the point and not after it more often than
  chance allows (p < STOP_P; prompt lookup drafts only on prompts whose n-grams recur, so a tail of
  requests of other prompts that drafted nothing is no stop). When that point falls inside the
  lowest level (before any load), the cause is state the server keeps across requests, not load;
  the collapse of the levels after it is then that stop, not a load effect, and is not reported
  twice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specaudit.contracts import DEFAULT_BAND, DisparityStatus
from specaudit.contracts.run import SPECULATIVE_ENGINE
from specaudit.contracts.snapshot import AcceptanceStabilitySection

MIN_STOPPED = 5  # requests in a row that drafted nothing, at the least, before a stop is claimed
MIN_PROMPTS = 5  # fewer prompts give an estimate without an interval, and no collapse is claimed
STOP_P = 0.01  # a stop is claimed when drafting that depends on the prompt leaves it this unlikely


def _per_token(records: list[dict]) -> dict[str, tuple[float, float]]:
    sums: dict[str, list[float]] = {}
    for r in records:
        entry = sums.setdefault(r["prompt_id"], [0.0, 0.0])
        entry[0] += float(r.get("accepted") or 0)
        entry[1] += len(r["output_token_ids"])
    return {prompt: (a, n) for prompt, (a, n) in sums.items()}


def _ratio(level: dict, base: dict, n_boot: int, seed: int) -> dict[str, Any]:
    """(Σ accepted / Σ tokens at the level) / (the same at the base level), paired over prompts."""
    from specaudit.stats._bootstrap import cluster_bootstrap

    prompts = sorted(set(level) & set(base))
    if not prompts:
        return {"estimate": None, "ci_low": None, "ci_high": None, "n_prompts": 0}
    arrays = np.array([[*level[p], *base[p]] for p in prompts], dtype=float)  # accepted, tokens at level; at base

    def ratio(weights: np.ndarray) -> np.ndarray:
        sums = weights @ arrays
        top = np.divide(sums[:, 0], sums[:, 1], out=np.zeros(len(sums)), where=sums[:, 1] > 0)
        bottom = np.divide(sums[:, 2], sums[:, 3], out=np.zeros(len(sums)), where=sums[:, 3] > 0)
        return np.divide(top, bottom, out=np.full(len(sums), np.nan), where=bottom > 0)

    estimate = float(ratio(np.ones((1, len(prompts))))[0])
    if len(prompts) < MIN_PROMPTS or not np.isfinite(estimate):
        return {"estimate": estimate if np.isfinite(estimate) else None, "ci_low": None, "ci_high": None, "n_prompts": len(prompts)}
    result = cluster_bootstrap(ratio, len(prompts), n_boot=n_boot, seed=seed)
    return {"estimate": estimate, "ci_low": float(result.ci_low), "ci_high": float(result.ci_high), "n_prompts": len(prompts)}


def _drafted_share(records: list[dict]) -> float | None:
    """The share of requests that drafted, of those whose drafted count is reported (None: none is;
    OpenVINO's batched requests report accepted drafts only)."""
    reported = [(r["proposed"] or 0) > 0 for r in records if r.get("proposed") is not None]
    return float(np.mean(reported)) if reported else None


def _stop(spec: list[dict]) -> dict[str, Any] | None:
    """The point from which every request drafted nothing (see the module docstring), or None
    where drafting that depends on the prompt explains it (_tail_p_value at least STOP_P)."""
    timed = sorted((r for r in spec if r.get("started_at") is not None), key=lambda r: r["started_at"])
    stop = stopped_drafting(timed)
    if stop is None:
        return None
    p_value = _tail_p_value(timed, stop["request"] - 1)
    return {**stop, "p_value": p_value} if p_value < STOP_P else None


def _tail_p_value(timed: list[dict], first_stopped: int) -> float:
    """The chance that every drafting request falls before `first_stopped` when, per prompt, which
    of its requests draft is exchangeable: prod over prompts of C(before, k) / C(all, k), k its
    drafting requests. Prompt lookup drafts only where a prompt's n-grams recur, so requests of
    prompts that never repeat draw nothing anywhere; only prompts seen on both sides of the point
    weigh, and a stop shown by other prompts alone is not claimed."""
    from math import comb

    counts: dict[str, list[int]] = {}
    for index, record in enumerate(timed):
        entry = counts.setdefault(record["prompt_id"], [0, 0, 0])  # before the point, all, drafted
        entry[0] += index < first_stopped
        entry[1] += 1
        entry[2] += (record.get("proposed") or 0) > 0
    p_value = 1.0
    for before, total, drafted in counts.values():
        p_value *= comb(before, drafted) / comb(total, drafted)
    return p_value


def stopped_drafting(timed: list[dict]) -> dict[str, Any] | None:
    """Of records in the order they ran, the point from which every one drafted nothing (at least
    MIN_STOPPED and a tenth of them, where earlier ones drafted, within one concurrency level):
    {request (1-based), of, stopped, level}, or None. Also asked of every engine after a fault
    (analysis.engine_faults)."""
    drafted = [i for i, r in enumerate(timed) if (r.get("proposed") or 0) > 0]
    if not drafted:
        return None
    first_stopped = drafted[-1] + 1
    stopped = len(timed) - first_stopped
    if stopped < max(MIN_STOPPED, len(timed) // 10):
        return None
    if timed[first_stopped].get("concurrency") != timed[drafted[-1]].get("concurrency"):
        return None  # it stopped as the load changed: the collapse under load says that

    return {"request": first_stopped + 1, "of": len(timed), "stopped": stopped, "level": timed[first_stopped].get("concurrency")}


def acceptance_stability(
    records: list[dict], *, n_boot: int, seed: int, band_low: float = DEFAULT_BAND[0]
) -> AcceptanceStabilitySection | None:
    """The section, or None for a run without levels or without per-request acceptance counts."""
    spec = [r for r in records if r["engine"] == SPECULATIVE_ENGINE and not r.get("timing_only") and r.get("concurrency") is not None]
    if not spec or not any((r.get("proposed") or 0) > 0 or (r.get("accepted") or 0) > 0 for r in spec):
        return None
    levels = sorted({int(r["concurrency"]) for r in spec})
    by_level = {level: _per_token([r for r in spec if r["concurrency"] == level]) for level in levels}
    stats = {}
    for level in levels:
        tokens = sum(n for _, n in by_level[level].values())
        stats[str(level)] = {
            "accepted_per_token": sum(a for a, _ in by_level[level].values()) / tokens if tokens else None,
            "drafted_share": _drafted_share([r for r in spec if r["concurrency"] == level]),
            "ratio_to_lowest": _ratio(by_level[level], by_level[levels[0]], n_boot, seed) if level != levels[0] else None,
        }
    findings = []
    stop = _stop(spec)
    if stop is not None:
        at = f"at concurrency {stop['level']}" if stop["level"] is not None else ""
        state = stop["level"] == levels[0]
        message = (
            f"the speculative server stopped drafting during the run: from request {stop['request']} of {stop['of']} ({at}) "
            f"on, none of {stop['stopped']} requests drafted a token (p = {stop['p_value']:.2g} for drafting that depends on the prompt only)"
            + (", before any load: state the server keeps across requests, not load, ended speculation" if state else "")
        )
        findings.append({**stop, "kind": "stopped_during_run", "message": message})
    for level in levels[1:]:
        ratio = stats[str(level)]["ratio_to_lowest"]
        explained = stop is not None and stop["level"] == levels[0]  # the stop came first: not a load effect
        if ratio["ci_high"] is not None and ratio["ci_high"] < band_low and not explained:
            findings.append(
                {
                    "kind": "collapse_under_load",
                    "level": level,
                    "message": (
                        f"acceptance collapses under load: at concurrency {level} the server accepts {ratio['estimate']:.2f}x the drafts "
                        f"per output token it accepts at concurrency {levels[0]} (95% CI {ratio['ci_low']:.2f}-{ratio['ci_high']:.2f}), "
                        "with the output unchanged"
                    ),
                }
            )
    return AcceptanceStabilitySection(
        status=DisparityStatus.FLAG if findings else DisparityStatus.WITHIN,
        band_low=band_low,
        levels=stats,
        findings=findings,
        **({"message": "; ".join(f["message"] for f in findings)} if findings else {}),
    )


__all__ = ["MIN_STOPPED", "acceptance_stability", "stopped_drafting"]
