import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from specaudit.decoding import SamplingSpec, warp
from specaudit.errors import InputError


@pytest.mark.parametrize(
    "spec",
    [
        SamplingSpec(1.0),
        SamplingSpec(0.7),
        SamplingSpec(1.0, top_k=5),
        SamplingSpec(0.8, top_p=0.9),
        SamplingSpec(1.3, top_k=20, top_p=0.5),
    ],
)
def test_warp_matches_transformers_processors(spec):
    """Our one warping must equal transformers' processors, or hf-assisted and our engines disagree."""
    torch.manual_seed(0)
    logits = torch.randn(6, 100) * 3
    processors = LogitsProcessorList([TemperatureLogitsWarper(spec.temperature)])
    if spec.top_k:
        processors.append(TopKLogitsWarper(spec.top_k))
    if spec.top_p < 1:
        processors.append(TopPLogitsWarper(spec.top_p))
    expected = processors(None, logits.clone()).softmax(-1)
    assert torch.allclose(warp(logits, spec), expected, atol=1e-6)


def test_greedy_is_one_hot_on_argmax():
    logits = torch.tensor([[0.1, 2.0, 1.9], [5.0, 0.0, 5.0]])
    probs = warp(logits, SamplingSpec(0.0))
    assert probs.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


def test_top_p_keeps_smallest_prefix_reaching_mass():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    warped = warp(probs.log(), SamplingSpec(1.0, top_p=0.8))
    assert torch.allclose(warped, torch.tensor([0.625, 0.375, 0.0, 0.0]))
    warped = warp(probs.log(), SamplingSpec(1.0, top_p=0.81))
    assert (warped > 0).sum() == 3


@pytest.mark.parametrize("kwargs", [{"temperature": -1}, {"top_k": -2}, {"top_p": 0.0}, {"top_p": 1.5}, {"temperature": float("nan")}])
def test_impossible_settings_are_input_errors(kwargs):
    with pytest.raises(InputError):
        SamplingSpec(**kwargs)
