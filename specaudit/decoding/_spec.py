"""SamplingSpec: how tokens are chosen. Torch-free, so configuration and the CLI can validate
sampling settings without importing torch (a bad flag fails in a fraction of a second).

Besides temperature, top-k and top-p it carries the request features that change the target's
distribution (docs/request-features.md): penalties (each convention users meet), min-p, a logit
bias, stop strings and a grammar. Their semantics live in `decoding.warping` (one implementation for every
engine, the scoring and the screen); this module only holds and checks the values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from specaudit.errors import InputError

# The fields every record's `sampling` carries; the request features are written only when set, so
# records and decoding identities of runs without them are what they always were.
BASE_FIELDS = ("temperature", "top_k", "top_p")


@dataclass(frozen=True)
class SamplingSpec:
    """How tokens are chosen. `temperature == 0` means greedy (argmax of the processed logits)."""

    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    min_p: float = 0.0  # 0 = off; keep tokens with p >= min_p * max p (after temperature, top-k, top-p)
    # transformers' / vLLM's multiplicative penalty on tokens seen in prompt + output (llama.cpp's repeat_penalty)
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0  # OpenAI / vLLM: subtracted once from a token already in the output
    frequency_penalty: float = 0.0  # OpenAI / vLLM: subtracted per occurrence in the output
    # 0: the scopes above (transformers / OpenAI / vLLM); n > 0: llama.cpp's, all three penalties over
    # the last n tokens of prompt + output (its repeat_last_n)
    repeat_last_n: int = 0
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit), sorted by id
    stop: tuple[str, ...] = ()  # text-level stop strings: the output ends where one first appears
    # a JSON schema or GBNF grammar (its text): the target masked to the tokens it allows, renormalised
    grammar: str = ""

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0) or self.temperature != self.temperature:
            raise InputError(f"temperature must be >= 0 (0 means greedy), got {self.temperature}")
        if self.top_k < 0:
            raise InputError(f"top-k must be >= 0 (0 turns it off), got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise InputError(f"top-p must be in (0, 1] (1 turns it off), got {self.top_p}")
        if not (0.0 <= self.min_p < 1.0):
            raise InputError(f"min_p must be in [0, 1) (0 turns it off), got {self.min_p}")
        if not (self.repetition_penalty > 0.0 and math.isfinite(self.repetition_penalty)):
            raise InputError(f"repetition_penalty must be a number > 0 (1 turns it off), got {self.repetition_penalty}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not math.isfinite(getattr(self, name)):
                raise InputError(f"{name} must be a finite number (0 turns it off), got {getattr(self, name)}")
        if self.repeat_last_n < 0:
            raise InputError(f"repeat_last_n must be >= 0 (0: the whole prompt and output), got {self.repeat_last_n}")
        ids = [token for token, _ in self.logit_bias]
        if any(token < 0 for token in ids) or len(set(ids)) != len(ids):
            raise InputError(f"logit_bias must name each token id >= 0 once, got ids {ids}")
        if any(not math.isfinite(bias) for _, bias in self.logit_bias):
            raise InputError("logit_bias values must be finite numbers (use -100 to ban a token)")
        if not isinstance(self.grammar, str):
            raise InputError(f"grammar must be the text of a JSON schema or GBNF grammar, got {type(self.grammar).__name__}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise InputError(f"stop strings must be non-empty text, got {list(self.stop)}")
        object.__setattr__(self, "logit_bias", tuple(sorted((int(t), float(b)) for t, b in self.logit_bias)))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def path_dependent(self) -> bool:
        """Whether processing a position needs the tokens before it (penalties, a grammar)."""
        return self.penalised or bool(self.grammar)

    @property
    def penalised(self) -> bool:
        """Whether the distribution at a position depends on the tokens before it (penalties)."""
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    @property
    def features(self) -> dict[str, Any]:
        """The request features set (not temperature, top-k, top-p), as `to_dict` writes them."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in BASE_FIELDS or getattr(self, f.name) == f.default:
                continue
            value = getattr(self, f.name)
            out[f.name] = [list(pair) for pair in value] if f.name == "logit_bias" else list(value) if f.name == "stop" else value
        return out

    def to_dict(self) -> dict:
        return {**{name: getattr(self, name) for name in BASE_FIELDS}, **self.features}

    @classmethod
    def from_dict(cls, sampling: dict) -> SamplingSpec:
        """The spec a record's `sampling` (or a config's settings) names; missing fields are off."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(sampling) - known)
        if unknown:
            raise InputError(f"sampling settings {unknown} are unknown; known: {', '.join(sorted(known))}")
        values = dict(sampling)
        if "logit_bias" in values:
            bias = values["logit_bias"]
            pairs = bias.items() if isinstance(bias, dict) else bias
            values["logit_bias"] = tuple((int(t), float(b)) for t, b in pairs)
        if "stop" in values:
            stop = values["stop"]
            values["stop"] = (stop,) if isinstance(stop, str) else tuple(stop)
        for name in ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"):
            if name in values:
                values[name] = float(values[name])
        for name in ("top_k", "repeat_last_n"):
            if name in values:
                values[name] = int(values[name])
        return cls(**values)
