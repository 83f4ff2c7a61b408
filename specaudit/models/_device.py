"""Device and dtype resolution, and synchronised timing."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from specaudit.errors import InputError

if TYPE_CHECKING:
    from transformers import Cache

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {device} was asked for but no CUDA GPU is available; use --device cpu or auto")
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise InputError(f"unknown device {device!r}; use auto, cpu or cuda[:N]")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """`auto` is bf16 on CUDA (what people deploy) and float32 on CPU, where not every CPU has native
    bf16 and float32 keeps the screen's rows equal to batch-1 decoding token for token (docs/screen.md,
    "bfloat16", has the figures for a CPU that does)."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in _DTYPES:
        raise InputError(f"unknown dtype {dtype!r}; use auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


class Stopwatch:
    """Wall-clock timer that waits for queued GPU work, so kernels are charged where they ran."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"

    def now(self) -> float:
        if self._cuda:
            torch.cuda.synchronize()
        return time.perf_counter()


def forward_cached(
    model: torch.nn.Module, input_ids: torch.Tensor, cache: Cache, logits_to_keep: int = 1, **inputs: torch.Tensor
) -> torch.Tensor:
    """One forward pass that reads and extends `cache`. transformers 5 calls the keyword `cache`
    (`past_key_values` is deprecated there); older releases only know `past_key_values`.
    `inputs` (attention_mask, position_ids) go to the model as given: batched rows need them."""
    return model(input_ids=input_ids, use_cache=True, logits_to_keep=logits_to_keep, **{cache_keyword(model): cache}, **inputs).logits


def cache_keyword(model: torch.nn.Module) -> str:
    """The name `model.forward` gives its KV cache argument, looked up once per model."""
    import inspect

    keyword = getattr(model, "_specaudit_cache_keyword", None)
    if keyword is None:
        keyword = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        model._specaudit_cache_keyword = keyword
    return keyword
