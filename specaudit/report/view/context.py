"""The report's "Long context" section: acceptance by output position and prompt length
(snapshot.context, written by specaudit.stats.context), with the prompt-length fallback."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specaudit.report.view.format import get, integer, num, with_ci


def context_view(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    part = snapshot.get("context")
    if not isinstance(part, Mapping):
        return {"ran": False, "reason": "the snapshot has no context section (analysed before it existed, or no speculative engine ran)"}
    positions = get(part, "by_output_position", "bands", default=[]) or []
    bands = get(part, "prompt_bands", default={}) or {}
    options = get(part, "length_fallback", "options", default=[]) or []
    return {
        "ran": True,
        "engine": part.get("engine"),
        "prompt_bands": ", ".join(f"{label}: {integer(n)}" for label, n in bands.items()),
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
        "findings": [str(f) for f in part.get("findings") or []],
    }
