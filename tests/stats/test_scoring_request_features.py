"""Scoring under request features: outputs of the vanilla and speculative engines, decoded with
penalties or min-p, fit the target processed at each of their own prefixes (calibration), and
outputs decoded without the feature do not (power). Tiny real models, a few seconds."""

import pytest
import torch

from specaudit.decoding import SamplingSpec, speculative_generate, vanilla_generate
from specaudit.stats.equivalence import goodness_of_fit
from specaudit.stats.scoring import score_records

N_SAMPLES, LENGTH = 24, 24


def _records(pair, engine: str, decoded_with: SamplingSpec, labelled: SamplingSpec, prompts: list[list[int]]) -> list[dict]:
    records = []
    for sample in range(N_SAMPLES):
        prompt = prompts[sample % len(prompts)]
        common = dict(
            spec=decoded_with,
            max_new_tokens=LENGTH,
            generator=torch.Generator().manual_seed(1000 + sample),
            eos_ids=set(),
            vocab_size=pair.vocab_size,
        )
        if engine == "vanilla":
            out = vanilla_generate(pair.target, prompt, **common)
        else:
            out = speculative_generate(pair.target, pair.draft, prompt, k=3, **common)
        records.append(
            {
                "key": f"p{sample % len(prompts)}|{engine}|{sample}",
                "prompt_id": f"p{sample % len(prompts)}",
                "engine": engine,
                "sample": sample,
                "prompt_token_ids": prompt,
                "output_token_ids": out.tokens,
                "sampling": labelled.to_dict(),
                "attributes": {},
            }
        )
    return records


def _verdict(pair, records) -> str:
    scores = score_records(pair.target, records, null_draws=0)  # normal approximations: fast enough for the inner loop
    return goodness_of_fit(scores, by=()).verdict


@pytest.fixture(scope="module")
def prompts(tiny_pair, tiny_texts):
    return [tiny_pair.tokenizer(text)["input_ids"] for text in tiny_texts.values()]


@pytest.mark.parametrize(
    ("engine", "spec"),
    [
        ("vanilla", SamplingSpec(repetition_penalty=3.0)),
        ("speculative", SamplingSpec(repetition_penalty=3.0)),
        ("speculative", SamplingSpec(presence_penalty=2.0, frequency_penalty=1.0)),
        ("speculative", SamplingSpec(min_p=0.2)),
    ],
    ids=["vanilla-repetition", "speculative-repetition", "speculative-presence-frequency", "speculative-min-p"],
)
def test_outputs_under_a_feature_fit_the_processed_target(tiny_pair, prompts, engine, spec):
    assert _verdict(tiny_pair, _records(tiny_pair, engine, spec, spec, prompts)) == "PASS"


def test_outputs_decoded_without_the_penalty_are_caught(tiny_pair, prompts):
    spec = SamplingSpec(presence_penalty=2.0, frequency_penalty=1.0)
    assert _verdict(tiny_pair, _records(tiny_pair, "speculative", SamplingSpec(), spec, prompts)) == "FAIL"
