"""Context length as an audit axis: prompt-length bands, acceptance by output position, and a
fallback rule a router can apply before decoding (the prompt's length).

Long inputs are where speculative decoding is said to change: a draft's acceptance may fall as
the context grows, so an audit reports it instead of assuming it.

- **Prompt length.** Every record's prompt gets a band of its length in the target's tokens
  (`context_band`: < 256, 256-1k, 1k-4k, 4k+), the derived prompt attribute `context`. It is a
  dimension like any other (`analyze --dimensions context`): acceptance and speed-up per band,
  with intervals, in the Fairness section. Analysis adds it by itself when the run's prompts
  span two bands or more; prompts that carry an attribute named `context` keep theirs.
- **Output position.** Per-position acceptance (accepted / drafted positions reached) per band
  of output position (0-15, 16-63, 64-255, 256+), with cluster-bootstrap intervals over
  prompts (the prompt is the sampled unit; positions of one prompt are correlated). For the
  engine a step that starts at output position s drafts positions s, s+1, ...; for the screen
  a_t (`position_accept`) is the acceptance probability at output position t along the path.
  Whether acceptance falls along the output is the ratio last band / first band, with an
  interval from the same replicates.
- **Does acceptance fall with prompt length?** Spearman's rank correlation between each
  prompt's acceptance rate and its length (prompts are independent, so its p-value holds).
- **Length fallback.** Routing every prompt of at least T tokens to vanilla, for each band
  boundary T, from the measured (or, for the screen, predicted) per-token times of both engines:
  unlike the acceptance rule of stats.advice this one needs nothing but the prompt, so a router
  can apply it as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

CONTEXT_DIMENSION = "context"
# (exclusive upper bound in tokens, label); None: no bound
PROMPT_BANDS: tuple[tuple[int | None, str], ...] = ((256, "<256"), (1024, "256-1k"), (4096, "1k-4k"), (None, "4k+"))
OUTPUT_BANDS: tuple[tuple[int | None, str], ...] = ((16, "0-15"), (64, "16-63"), (256, "64-255"), (None, "256+"))
MIN_GAIN = 0.05  # a length threshold is advised when it raises the overall speed-up by at least this share


def band_index(value: int, bands: Sequence[tuple[int | None, str]]) -> int:
    for index, (upper, _) in enumerate(bands):
        if upper is None or value < upper:
            return index
    raise ValueError("bands must end with an unbounded one")


def context_band(prompt_tokens: int) -> str:
    """The prompt-length band of a prompt of `prompt_tokens` tokens."""
    return PROMPT_BANDS[band_index(prompt_tokens, PROMPT_BANDS)][1]


def has_own_context_attribute(records: list[dict]) -> bool:
    return any(CONTEXT_DIMENSION in (r.get("attributes") or {}) for r in records)


def spans_bands(records: list[dict]) -> bool:
    """Whether the run's prompts fall in two prompt-length bands or more."""
    return len({context_band(len(r["prompt_token_ids"])) for r in records}) > 1


def with_context_band(records: list[dict]) -> list[dict]:
    """The records with attributes.context set to their prompt's length band (new dicts, the
    records themselves untouched); unchanged when the prompts carry a `context` attribute."""
    if has_own_context_attribute(records):
        return records
    return [
        {**r, "attributes": {**(r.get("attributes") or {}), CONTEXT_DIMENSION: context_band(len(r["prompt_token_ids"]))}} for r in records
    ]


# ----------------------------------------------------------------------------- output position
def _position_sums(records: list[dict], prompt_index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Accepted and reached drafted positions per prompt and output band: two [P, B] arrays."""
    accepted = np.zeros((len(prompt_index), len(OUTPUT_BANDS)))
    reached = np.zeros_like(accepted)
    for record in records:
        row = prompt_index[record["prompt_id"]]
        along_path = record.get("position_accept")
        if along_path is not None:  # the screen: a_t at every output position of the path
            for position, value in enumerate(along_path):
                band = band_index(position, OUTPUT_BANDS)
                accepted[row, band] += float(value)
                reached[row, band] += 1.0
            continue
        start = 0
        for kept, drafted in zip(record.get("accepted_per_step") or (), record.get("proposed_per_step") or ()):
            for offset in range(max(min(int(kept) + 1, int(drafted)), 0)):  # tried while every earlier draft was kept
                band = band_index(start + offset, OUTPUT_BANDS)
                accepted[row, band] += float(offset < kept)
                reached[row, band] += 1.0
            start += int(kept) + 1  # the step emitted its kept drafts and one token of the target's
    return accepted, reached


def acceptance_by_output_position(
    records: list[dict], engine: str, *, n_boot: int = 1000, seed: int = 0, confidence: float = 0.95
) -> dict[str, Any] | None:
    """Per-position acceptance of `engine` per output-position band, with bootstrap intervals,
    and the ratio of the last band with data to the first; None when no record has per-position data."""
    from specaudit.stats._bootstrap import cluster_replicates

    rows = [r for r in records if r["engine"] == engine and not r.get("timing_only")]
    prompt_index = {pid: i for i, pid in enumerate(sorted({r["prompt_id"] for r in rows}))}
    if not prompt_index:
        return None
    accepted, reached = _position_sums(rows, prompt_index)
    used = np.flatnonzero(reached.sum(axis=0) > 0)
    if used.size == 0:
        return None
    accepted, reached = accepted[:, used], reached[:, used]

    def rates(weights: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return (weights @ accepted) / (weights @ reached)

    replicates = cluster_replicates(rates, len(prompt_index), n_boot=n_boot, seed=seed)
    bands = replicates.interval(confidence)
    table = [
        {
            "band": OUTPUT_BANDS[band][1],
            "value": float(np.atleast_1d(bands.statistic)[i]),
            "ci_low": float(np.atleast_1d(bands.ci_low)[i]),
            "ci_high": float(np.atleast_1d(bands.ci_high)[i]),
            "n_prompts": int((reached[:, i] > 0).sum()),
            "n_positions": int(reached[:, i].sum()),
        }
        for i, band in enumerate(used)
    ]
    trend = None
    if used.size > 1:
        ratio = replicates.map(lambda values: values[..., -1] / values[..., 0]).interval(confidence)
        trend = {
            "first": table[0]["band"],
            "last": table[-1]["band"],
            "ratio": float(ratio.statistic),
            "ci_low": float(ratio.ci_low),
            "ci_high": float(ratio.ci_high),
            "falls": bool(ratio.ci_high < 1.0),
            "rises": bool(ratio.ci_low > 1.0),
        }
    return {"engine": engine, "confidence": confidence, "bands": table, "trend": trend}


# ----------------------------------------------------------------------------- prompt length
def acceptance_by_prompt_length(records: list[dict], engine: str, alpha: float = 0.05) -> dict[str, Any] | None:
    """Spearman's rank correlation between each prompt's acceptance rate (Σ accepted / Σ proposed)
    and its length; None with fewer than 3 prompts, a single length or a single rate."""
    from scipy.stats import spearmanr

    totals: dict[str, list[float]] = {}
    for r in records:
        if r["engine"] != engine or r.get("timing_only") or not r.get("proposed"):
            continue
        entry = totals.setdefault(r["prompt_id"], [len(r["prompt_token_ids"]), 0.0, 0.0])
        entry[1] += float(r["accepted"])
        entry[2] += float(r["proposed"])
    lengths = np.array([v[0] for v in totals.values()], dtype=float)
    if len(lengths) < 3 or np.unique(lengths).size < 2:
        return None
    rates = np.array([v[1] / v[2] for v in totals.values()])
    if np.unique(rates).size < 2:  # every prompt kept the same share (all drafts, or none): no correlation to speak of
        return None
    result = spearmanr(lengths, rates)
    rho, pvalue = float(result.statistic), float(result.pvalue)
    significant = bool(np.isfinite(pvalue) and pvalue < alpha)
    return {
        "engine": engine,
        "spearman_rho": rho,
        "pvalue": pvalue,
        "alpha": alpha,
        "n_prompts": int(len(lengths)),
        "shortest": int(lengths.min()),
        "longest": int(lengths.max()),
        "falls": significant and rho < 0,
        "rises": significant and rho > 0,
    }


# ----------------------------------------------------------------------------- length fallback
def length_fallback(per_prompt: pd.DataFrame, lengths: dict[str, int]) -> dict[str, Any] | None:
    """The overall speed-up if every prompt of at least T tokens ran on vanilla, for each band
    boundary T inside the run's lengths (stats.advice.simulate_fallback's arithmetic, on
    per_prompt_metrics' table indexed by prompt id); None without paired timings."""
    from specaudit.stats.advice import simulate_fallback

    table = per_prompt.copy()
    table["prompt_tokens"] = [lengths.get(pid, np.nan) for pid in table.index]
    longest = np.nanmax(table["prompt_tokens"].to_numpy(dtype=float)) if len(table) else np.nan
    labels = ["all"] * len(table)
    options = []
    for upper, _ in PROMPT_BANDS[:-1]:
        if not np.isfinite(longest) or upper >= longest + 1:
            break
        table["short_prompt"] = (table["prompt_tokens"] < upper).astype(float)  # routed: not short (< 0.5)
        sim = simulate_fallback(table, labels, 0.5, threshold_metric="short_prompt")
        overall = sim.loc["overall"]
        if not overall["n_paired_prompts"]:
            return None
        options.append(
            {
                "min_prompt_tokens": int(upper),
                "n_routed": int(overall["n_routed"]),
                "n_paired_prompts": int(overall["n_paired_prompts"]),
                "speedup_before": float(overall["speedup_before"]),
                "speedup_after": float(overall["speedup_after"]),
            }
        )
    if not options:
        return None
    best = max(options, key=lambda o: o["speedup_after"])
    advised = best if np.isfinite(best["speedup_after"]) and best["speedup_after"] > (1 + MIN_GAIN) * best["speedup_before"] else None
    return {
        "rule": "route a prompt of at least min_prompt_tokens tokens to vanilla decoding (known before decoding)",
        "options": options,
        "advised": advised,
    }


def length_fallback_message(fallback: dict[str, Any] | None) -> str | None:
    if not fallback:
        return None
    best = fallback["advised"]
    if best is None:
        top = max(fallback["options"], key=lambda o: o["speedup_after"])
        return (
            f"No prompt-length threshold pays off on this run: routing prompts of ≥ {top['min_prompt_tokens']:,} tokens to "
            f"vanilla would move the overall speed-up from {top['speedup_before']:.2f}× to {top['speedup_after']:.2f}×."
        )
    return (
        f"Route prompts of ≥ {best['min_prompt_tokens']:,} prompt tokens to vanilla decoding ({best['n_routed']} of "
        f"{best['n_paired_prompts']} prompts): the overall speed-up moves from {best['speedup_before']:.2f}× to "
        f"{best['speedup_after']:.2f}×. A router knows a prompt's length before decoding, so this rule can be deployed as it is."
    )


# ----------------------------------------------------------------------------- the snapshot's section
def context_section(
    records: list[dict],
    engine: str,
    *,
    per_prompt: pd.DataFrame | None = None,
    alpha: float = 0.05,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """snapshot.context: prompt bands, acceptance by output position and by prompt length, the
    length fallback (with `per_prompt`, per_prompt_metrics' table of the disparity engine) and
    one sentence per finding."""
    prompts: dict[str, int] = {}
    for r in records:
        prompts.setdefault(r["prompt_id"], len(r["prompt_token_ids"]))
    counts: dict[str, int] = {}
    for length in prompts.values():
        counts[context_band(length)] = counts.get(context_band(length), 0) + 1
    by_position = acceptance_by_output_position(records, engine, n_boot=n_boot, seed=seed)
    by_length = acceptance_by_prompt_length(records, engine, alpha)
    fallback = length_fallback(per_prompt, prompts) if per_prompt is not None and len(counts) > 1 else None
    findings = []
    if by_length is not None:
        direction = "falls" if by_length["falls"] else "rises" if by_length["rises"] else None
        findings.append(f"Acceptance {direction} with prompt length" if direction else "No trend of acceptance with prompt length is shown")
        findings[-1] += (
            f" ({by_length['n_prompts']} prompts of {by_length['shortest']:,}–{by_length['longest']:,} tokens, Spearman ρ = "
            f"{by_length['spearman_rho']:.2f}, p = {by_length['pvalue']:.2g})."
        )
    trend = by_position and by_position["trend"]
    if trend:
        direction = "falls" if trend["falls"] else "rises" if trend["rises"] else None
        head = f"Per-position acceptance {direction} along the output" if direction else "No change of acceptance along the output is shown"
        findings.append(
            f"{head}: output positions {trend['last']} against {trend['first']}, ratio {trend['ratio']:.2f} "
            f"(95% CI {trend['ci_low']:.2f}–{trend['ci_high']:.2f})."
        )
    message = length_fallback_message(fallback)
    if message:
        findings.append(message)
    return {
        "engine": engine,
        "prompt_bands": {label: counts[label] for _, label in PROMPT_BANDS if label in counts},
        "band_edges": {"prompt_tokens": [u for u, _ in PROMPT_BANDS if u], "output_position": [u for u, _ in OUTPUT_BANDS if u]},
        "by_output_position": by_position,
        "by_prompt_length": by_length,
        "length_fallback": fallback,
        "findings": findings,
    }


__all__ = [
    "CONTEXT_DIMENSION",
    "OUTPUT_BANDS",
    "PROMPT_BANDS",
    "acceptance_by_output_position",
    "acceptance_by_prompt_length",
    "context_band",
    "context_section",
    "length_fallback",
    "spans_bands",
    "with_context_band",
]
