"""The report's "Long context" section: acceptance by output position and prompt length
(snapshot.context, written by specaudit.stats.context), with the prompt-length fallback."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specaudit.report.view.format import integer, num, with_ci

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import ContextSection


def context_view(part: ContextSection | None) -> dict[str, Any]:
    if part is None:
        return {"ran": False, "reason": "the snapshot has no context section (analysed before it existed, or no speculative engine ran)"}
    positions = part.by_output_position.bands if part.by_output_position is not None else []
    options = part.length_fallback.options if part.length_fallback is not None else []
    return {
        "ran": True,
        "engine": part.engine,
        "prompt_bands": ", ".join(f"{label}: {integer(n)}" for label, n in part.prompt_bands.items()),
        "positions": [
            {
                "band": row.band,
                "value": with_ci(row.value, row.ci_low, row.ci_high),
                "prompts": integer(row.n_prompts),
                "positions": integer(row.n_positions),
            }
            for row in positions
        ],
        "fallback": [
            {
                "threshold": f"≥ {integer(o.min_prompt_tokens)} tokens",
                "routed": f"{integer(o.n_routed)} of {integer(o.n_paired_prompts)}",
                "speedup": f"{num(o.speedup_before)}× → {num(o.speedup_after)}×",
            }
            for o in options
        ],
        "findings": part.findings,
    }
