"""A rejection step that fails like a runtime does mid-run, for the engine-fault tests: the
reference verify, except that the calls whose number (counted from `reset`) is in `FAILING`
raise RuntimeError with an engine-like message. `FAILING` is set by each test."""

from __future__ import annotations

from specaudit.decoding import reference_verify

FAILING: set[int] = set()
MESSAGE = "device-side assert triggered in verify kernel (planted fault)"
_calls = [0]


def reset(failing: set[int] | range) -> None:
    FAILING.clear()
    FAILING.update(failing)
    _calls[0] = 0


def verify(draft_tokens, draft_probs, target_probs, generator):
    _calls[0] += 1
    if _calls[0] in FAILING:
        raise RuntimeError(MESSAGE)
    return reference_verify(draft_tokens, draft_probs, target_probs, generator)
