"""A planted disparity: one group's draft made worse by a known, call-invariant amount.

On the planted group's prompts the draft's distribution becomes the mixture
q' = factor·q + (1 − factor)·uniform over the vocabulary. The mixture is a fixed function of the
draft's logits at each position, so teacher forcing, batched screening and step-by-step decoding
all see the same q' (noise drawn per call could not be reproduced by the screen or by scoring).
At temperature 1 without top-k/top-p, Σ min(p, q') ≥ factor·Σ min(p, q): the group's acceptance
falls to about `factor` times its value (docs/screen.md has the measured ratio). The speculative
sampler stays exact: it verifies against the q' it sampled from.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from specaudit.errors import InputError

if TYPE_CHECKING:
    from typing import Any

FLAG = "--plant-disparity"


@dataclass(frozen=True)
class DisparityPlant:
    """`dimension=group:factor`: mix the draft toward uniform on that group's prompts."""

    dimension: str
    group: str
    factor: float

    @classmethod
    def parse(cls, text: str) -> DisparityPlant:
        where, _, factor_text = text.rpartition(":")
        dimension, _, group = where.partition("=")
        try:
            factor = float(factor_text)
        except ValueError:
            factor = math.nan
        if not (dimension and group and 0.0 < factor < 1.0):
            raise InputError(
                f"{FLAG} {text!r}: write dimension=group:factor with 0 < factor < 1 (the share of the draft kept; "
                "1 would plant nothing), e.g. language=fr:0.5"
            )
        return cls(dimension, group, factor)

    def applies_to(self, attributes: Mapping[str, object] | None) -> bool:
        return (attributes or {}).get(self.dimension) == self.group

    def mix(self, logits: torch.Tensor, vocab_size: int, rows: torch.Tensor | None = None) -> torch.Tensor:
        """log(factor·softmax(l) + (1 − factor)/V) over the first `vocab_size` entries of the last
        axis (padding entries beyond it become −inf); `rows` (bool, first axis) limits it to some rows."""
        real = logits[..., :vocab_size].float()
        mixed = torch.logaddexp(
            torch.log_softmax(real, dim=-1) + math.log(self.factor),
            torch.full_like(real, math.log((1.0 - self.factor) / vocab_size)),
        )
        if logits.shape[-1] > vocab_size:
            padding = torch.full((*logits.shape[:-1], logits.shape[-1] - vocab_size), -math.inf, device=logits.device)
            mixed = torch.cat([mixed, padding], dim=-1)
        mixed = mixed.to(logits.dtype)
        if rows is None:
            return mixed
        keep = rows.to(logits.device).view(-1, *([1] * (logits.dim() - 1)))
        return torch.where(keep, mixed, logits)


class PlantedDraft(torch.nn.Module):
    """A draft model whose logits go through `plant.mix` (on every row, or on the rows of `rows`)."""

    def __init__(self, draft: torch.nn.Module, plant: DisparityPlant, vocab_size: int, rows: torch.Tensor | None = None) -> None:
        super().__init__()
        self.draft = draft
        self.config = draft.config
        self.plant = plant
        self.vocab_size = vocab_size
        self.rows = rows
        # forward_cached picks the cache keyword from the wrapped model's signature, not ours.
        self._specaudit_cache_keyword = "cache" if "cache" in inspect.signature(draft.forward).parameters else "past_key_values"

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> Any:
        output = self.draft(input_ids=input_ids, **kwargs)
        output.logits = self.plant.mix(output.logits, self.vocab_size, self.rows)
        return output
