"""Stop strings: the output ends where a stop string first appears in its text.

The target's distribution with stop strings is plain decoding cut at the first stop, and the
tokens before a cut never depend on what would have followed it; so every engine's output is cut
the same way after decoding (decoding past a stop only costs time, it changes no kept token).
The stop's token is the last one kept (it completes the stop), and the text ends before the
stop, as the OpenAI API, vLLM and llama-server return it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specaudit.decoding._generation import Generation


def first_stop(text: str, stops: Sequence[str]) -> int | None:
    """Where the earliest stop string starts in `text` (None: none does)."""
    found = [index for index in (text.find(stop) for stop in stops) if index >= 0]
    return min(found) if found else None


def cut_at_stop(tokens: Sequence[int], decode: Callable[[Sequence[int]], str], stops: Sequence[str]) -> tuple[int, str] | None:
    """(tokens kept, text before the stop) at the first stop string the tokens' text holds; None
    when none appears. Kept tokens end with the token whose text completes the stop."""
    if not stops or not tokens or first_stop(decode(tokens), stops) is None:
        return None
    for kept in range(1, len(tokens) + 1):  # the first prefix whose text holds a stop
        text = decode(tokens[:kept])
        at = first_stop(text, stops)
        if at is not None:
            return kept, text[:at]
    return None  # unreachable: the whole output holds one


def apply_stops(generation: Generation, text: str, decode: Callable[[Sequence[int]], str], stops: Sequence[str]) -> str:
    """Cut `generation` in place at its first stop string (finish_reason "stop", per-token lists
    cut too); return the text to record."""
    cut = cut_at_stop(generation.tokens, decode, stops)
    if cut is None:
        return text
    kept, kept_text = cut
    del generation.tokens[kept:]
    del generation.step_pit[kept:]
    generation.finish_reason = "stop"
    return kept_text
