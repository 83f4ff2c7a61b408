"""SamplingSpec: how tokens are chosen. Torch-free, so configuration and the CLI can validate
sampling settings without importing torch (a bad flag fails in a fraction of a second)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specaudit.errors import InputError


@dataclass(frozen=True)
class SamplingSpec:
    """How tokens are chosen. `temperature == 0` means greedy (argmax)."""

    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0) or self.temperature != self.temperature:
            raise InputError(f"temperature must be >= 0 (0 means greedy), got {self.temperature}")
        if self.top_k < 0:
            raise InputError(f"top-k must be >= 0 (0 turns it off), got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise InputError(f"top-p must be in (0, 1] (1 turns it off), got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict:
        return asdict(self)
