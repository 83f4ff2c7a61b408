"""Decoding engines under one SamplingSpec and one warping implementation.

The engines import torch; `ENGINES` and `SamplingSpec` do not, so the names below are imported on
first use and `from specaudit.decoding import SamplingSpec` stays light.
"""

from importlib import import_module

from specaudit.decoding._spec import ENGINES, SamplingSpec

_LAZY = {
    "Generation": "specaudit.decoding._generation",
    "VerifyFn": "specaudit.decoding.verify",
    "acceptance_probabilities": "specaudit.decoding.verify",
    "hf_assisted_generate": "specaudit.decoding.hf_assisted",
    "reference_verify": "specaudit.decoding.verify",
    "residual_distribution": "specaudit.decoding.verify",
    "sample_from": "specaudit.decoding.verify",
    "speculative_generate": "specaudit.decoding.speculative",
    "vanilla_generate": "specaudit.decoding.vanilla",
    "warp": "specaudit.decoding.warping",
}

__all__ = ["ENGINES", "SamplingSpec", *sorted(_LAZY)]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'specaudit.decoding' has no attribute {name!r}")


def __dir__():
    return __all__
