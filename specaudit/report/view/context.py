"""The report's "Long context" section: acceptance by output position and prompt length
(snapshot.context, written by specaudit.stats.context), with the prompt-length fallback."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from specaudit.report.view.format import integer, num, with_ci

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import ContextSection


def context_view(part: ContextSection | None) -> dict[str, Any]:
    if part is None:
        return {"ran": False, "reason": "the snapshot has no context section (analysed before it existed, or no speculative engine ran)"}
    positions = (part.by_output_position or {}).get("bands") or []
    options = (part.length_fallback or {}).get("options") or []
    return {
        "ran": True,
        "engine": part.engine,
        "prompt_bands": ", ".join(f"{label}: {integer(n)}" for label, n in part.prompt_bands.items()),
        "positions": [
            {
                "band": row.get("band"),
                "value": with_ci(row.get("value"), row.get("ci_low"), row.get("ci_high")),
                "prompts": integer(row.get("n_prompts")),
                "positions": integer(row.get("n_positions")),
            }
            for row in positions
            if isinstance(row, Mapping)
        ],
        "fallback": [
            {
                "threshold": f"≥ {integer(o.get('min_prompt_tokens'))} tokens",
                "routed": f"{integer(o.get('n_routed'))} of {integer(o.get('n_paired_prompts'))}",
                "speedup": f"{num(o.get('speedup_before'))}× → {num(o.get('speedup_after'))}×",
            }
            for o in options
            if isinstance(o, Mapping)
        ],
        "findings": part.findings,
    }
