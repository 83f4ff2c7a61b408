"""Logits a few positions at a time: the decoder's last hidden states once, the output layer per chunk.

At a real vocabulary the logits are the largest tensors of an audit: 32 rows x 300 positions x
151,936 float32 entries are 5.8 GB per model, while the decoder's last hidden states are V/H
times smaller (170x for Qwen2.5-Coder-0.5B, H = 896). Where a model's logits are exactly its
output layer applied to those hidden states (Llama, Qwen2, SmolLM2 and most causal LMs;
`plain_head` checks it once per model on a probe, so a model that rescales or caps its logits is
never chunked), callers keep the hidden states and turn a few positions at a time into logits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from specaudit.models._device import cache_keyword

if TYPE_CHECKING:
    from transformers import Cache

# Per chunk of logits: about 64 MB of float32, whatever the vocabulary and batch.
CHUNK_ELEMENTS = 1 << 24


def positions_per_chunk(rows: int, vocab: int, chunk_elements: int = CHUNK_ELEMENTS) -> int:
    return max(1, chunk_elements // max(1, rows * vocab))


def plain_head(model: torch.nn.Module) -> bool:
    """Whether `model(...).logits` is `output layer(decoder(...).last_hidden_state)`, bit for bit,
    on a four-token probe (remembered on the model)."""
    known = getattr(model, "_specaudit_plain_head", None)
    if known is not None:
        return known
    plain = False
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if head is not None and decoder is not None and decoder is not model:
        device = next(model.parameters()).device
        probe = torch.arange(1, 5, device=device)[None, :] % model.config.vocab_size
        with torch.inference_mode():
            whole = model(input_ids=probe).logits
            split = head(decoder(input_ids=probe).last_hidden_state)
        plain = whole.shape == split.shape and torch.equal(whole, split)
    model._specaudit_plain_head = plain
    return plain


def last_hidden_states(model: torch.nn.Module, input_ids: torch.Tensor, cache: Cache | None = None, **inputs: torch.Tensor) -> torch.Tensor:
    """[B, L, H]: the decoder's output for `input_ids` (reading and extending `cache` when given),
    what the model's output layer turns into logits."""
    decoder = model.get_decoder()
    if cache is not None:
        inputs = {**inputs, cache_keyword(decoder): cache, "use_cache": True}
    return decoder(input_ids=input_ids, **inputs).last_hidden_state


def head_logits(model: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """Logits of some positions' hidden states (a slice of `last_hidden_states`)."""
    return model.get_output_embeddings()(hidden)
