"""Decoding engines under one SamplingSpec and one warping implementation."""

from specaudit.decoding._generation import Generation
from specaudit.decoding.hf_assisted import hf_assisted_generate
from specaudit.decoding.speculative import speculative_generate
from specaudit.decoding.vanilla import vanilla_generate
from specaudit.decoding.verify import VerifyFn, acceptance_probabilities, reference_verify, residual_distribution, sample_from
from specaudit.decoding.warping import SamplingSpec, warp

ENGINES = ("vanilla", "speculative", "hf-assisted")

__all__ = [
    "ENGINES",
    "Generation",
    "SamplingSpec",
    "VerifyFn",
    "acceptance_probabilities",
    "hf_assisted_generate",
    "reference_verify",
    "residual_distribution",
    "sample_from",
    "speculative_generate",
    "vanilla_generate",
    "warp",
]
