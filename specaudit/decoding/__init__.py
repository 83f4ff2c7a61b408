"""Decoding engines under one SamplingSpec and one warping implementation.

The engines import torch; `SamplingSpec` does not, so the names below are imported on
first use and `from specaudit.decoding import SamplingSpec` stays light.
"""

from specaudit._lazy import lazy_exports
from specaudit.decoding._spec import SamplingSpec

_LAZY = {
    "Generation": "specaudit.decoding._generation",
    "SpeculativeDecoding": "specaudit.decoding.speculative",
    "VanillaDecoding": "specaudit.decoding.vanilla",
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

__all__ = ["SamplingSpec", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
