"""A target model outside torch (llama.cpp, OpenVINO) made to score records as a torch causal LM
does: `model(input_ids=..., attention_mask=...).logits` [rows, T, V], each row teacher-forced alone
at its real length by the runtime's own `sequence_logits`, so specaudit.stats.scoring and the
greedy checks read the engine's own numbers. Subclasses give `vocab_size` and `sequence_logits`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Self

    import numpy as np
    import torch


@dataclass(frozen=True)
class LogitsOutput:
    logits: Any  # torch.Tensor [rows, T, V]


class ExternalLogits:
    """The torch-module face the scoring code calls (eval, train, parameters, __call__); nothing to move or train."""

    training = False
    vocab_size: int

    def sequence_logits(self, ids: list[int]) -> np.ndarray:
        """[len(ids), V] float32 logits, position t predicting token t + 1, from an empty state."""
        raise NotImplementedError

    def eval(self) -> Self:
        return self

    def train(self, mode: bool = True) -> Self:
        return self

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        return iter(())  # nothing for torch to move; scoring reads the device as CPU

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, use_cache: bool = False) -> LogitsOutput:
        import torch

        rows = input_ids.tolist()
        lengths = attention_mask.sum(dim=1).tolist() if attention_mask is not None else [len(r) for r in rows]
        out = torch.zeros((len(rows), len(rows[0]), self.vocab_size), dtype=torch.float32)
        for i, (row, length) in enumerate(zip(rows, lengths, strict=True)):
            out[i, : int(length)] = torch.from_numpy(self.sequence_logits(row[: int(length)]))
        return LogitsOutput(out)


@dataclass
class ScoringPair:
    """What analyze needs of a model pair, with an external target and no draft model."""

    target: ExternalLogits
    tokenizer: Any
    vocab_size: int
    device: Any
    draft: Any = None
    draft_is_model: bool = False


__all__ = ["ExternalLogits", "LogitsOutput", "ScoringPair"]
