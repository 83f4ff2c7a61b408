"""Request features in the one warping (docs/request-features.md): each against an independent
reference (transformers' processors, the formulas written out per position), one speculative
step exact under penalties only when every draft is verified at its own prefix, stop strings."""

import pytest
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from specaudit.decoding import SamplingSpec, residual_distribution, warp
from specaudit.decoding.stops import cut_at_stop
from specaudit.decoding.warping import Prefix

PROMPT, OUTPUT = [1, 2, 3, 4, 5, 2], [6, 7, 6, 8, 6]


def _logits(rows: int, vocab: int = 40, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 3


def test_repetition_penalty_temperature_top_p_min_p_match_transformers_at_every_position():
    logits = _logits(len(OUTPUT) + 1)
    spec = SamplingSpec(temperature=0.7, top_p=0.9, min_p=0.1, repetition_penalty=1.3)
    ours = warp(logits, spec, Prefix(PROMPT, OUTPUT))
    chain = [RepetitionPenaltyLogitsProcessor(1.3), TemperatureLogitsWarper(0.7), TopPLogitsWarper(0.9), MinPLogitsWarper(0.1)]
    for row in range(len(OUTPUT) + 1):
        ids = torch.tensor([PROMPT + OUTPUT[:row]])
        scores = logits[row : row + 1].clone()
        for processor in chain:
            scores = processor(ids, scores)
        torch.testing.assert_close(ours[row], scores.softmax(-1)[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("window", [0, 3])
def test_presence_frequency_and_llama_cpp_window_match_the_formulas(window):
    logits = _logits(len(OUTPUT) + 1, seed=1)
    spec = SamplingSpec(repetition_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.7, repeat_last_n=window, logit_bias=((6, 2.0),))
    ours = warp(logits, spec, Prefix(PROMPT, OUTPUT))
    for row in range(len(OUTPUT) + 1):
        expected = logits[row].clone()
        expected[6] += 2.0  # the bias first, on the raw logits
        history = PROMPT + OUTPUT[:row]
        # transformers / OpenAI scopes: repetition over prompt + output, presence and frequency over the output;
        # llama.cpp's: all three over the last `window` tokens
        seen = history[-window:] if window else history
        counted = history[-window:] if window else OUTPUT[:row]
        for token in set(seen):
            expected[token] = expected[token] / 1.5 if expected[token] > 0 else expected[token] * 1.5
        for token in set(counted):
            expected[token] -= 0.5 + 0.7 * counted.count(token)
        torch.testing.assert_close(ours[row], expected.softmax(-1), rtol=0, atol=1e-12)


def test_rows_of_a_batch_each_take_their_own_prefix():
    logits = _logits(3, seed=2)
    spec = SamplingSpec(frequency_penalty=1.0)
    prefixes = [Prefix(PROMPT, OUTPUT[:i]) for i in range(3)]
    batched = warp(logits, spec, prefixes)
    for row, prefix in enumerate(prefixes):
        torch.testing.assert_close(batched[row], warp(logits[row], spec, prefix))
    with pytest.raises(ValueError, match="pass prefix="):
        warp(logits, spec)


def test_greedy_takes_the_argmax_of_the_penalised_logits():
    logits = torch.tensor([[3.0, 2.9, 0.0]], dtype=torch.float64)
    assert int(warp(logits, SamplingSpec(0.0, repetition_penalty=1.2), Prefix([0], [])).argmax()) == 1


# -------------------------------------------------------------- one speculative step, enumerated
V, K = 3, 2


def _toy(seed: int):
    table = torch.randn(64, V, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2

    def logits(prefix: tuple[int, ...]) -> torch.Tensor:
        return table[sum((t + 1) * 4**i for i, t in enumerate(prefix)) % 64]

    return logits


def _step_law(target, draft, spec, prompt, verified_prefix) -> dict[tuple[int, ...], float]:
    """Law of the tokens one speculative step emits; `verified_prefix(output)` is the prefix the
    verifier warps the target with at a drafted position whose output so far is `output`."""
    out: dict[tuple[int, ...], float] = {}

    def walk(output: tuple[int, ...], mass: float) -> None:
        if mass == 0.0:
            return
        p = warp(target(output), spec, verified_prefix(prompt, list(output)))
        if len(output) == K:
            for token in range(V):
                out[output + (token,)] = out.get(output + (token,), 0.0) + mass * float(p[token])
            return
        q = warp(draft(output), spec, Prefix(prompt, list(output)))
        residual = residual_distribution(p, q)
        for token in range(V):
            proposed = mass * float(q[token])
            accept = min(1.0, float(p[token] / q[token])) if proposed else 0.0
            walk(output + (token,), proposed * accept)
            for correction in range(V):
                key = output + (correction,)
                out[key] = out.get(key, 0.0) + proposed * (1.0 - accept) * float(residual[correction])

    walk((), 1.0)
    return out


def _target_law(target, spec, prompt, length: int) -> dict[tuple[int, ...], float]:
    law = {(): 1.0}
    for _ in range(length):
        law = {
            seq + (t,): mass * float(warp(target(seq), spec, Prefix(prompt, list(seq)))[t]) for seq, mass in law.items() for t in range(V)
        }
    return law


def _completed(law: dict[tuple[int, ...], float], target, spec, prompt, length: int) -> dict[tuple[int, ...], float]:
    """The step's law with every shorter output continued from the target's law to `length` tokens
    (what the next steps of a correct engine do), each cut to `length`."""
    out: dict[tuple[int, ...], float] = {}
    for seq, mass in law.items():
        for rest, rest_mass in _continued(target, spec, prompt, seq, length - len(seq)).items():
            key = (seq + rest)[:length]
            out[key] = out.get(key, 0.0) + mass * rest_mass
    return out


def _continued(target, spec, prompt, seq, steps):
    law = {(): 1.0}
    for _ in range(max(steps, 0)):
        law = {
            rest + (t,): mass * float(warp(target(seq + rest), spec, Prefix(prompt, list(seq + rest)))[t])
            for rest, mass in law.items()
            for t in range(V)
        }
    return law


@pytest.mark.parametrize("spec", [SamplingSpec(repetition_penalty=2.0), SamplingSpec(0.8, presence_penalty=1.0, frequency_penalty=1.0)])
def test_a_speculative_step_is_exact_under_penalties_when_each_draft_is_verified_at_its_own_prefix(spec):
    target, draft, prompt = _toy(0), _toy(1), [0, 1]
    correct = _step_law(target, draft, spec, prompt, lambda p, output: Prefix(p, output))
    # An engine whose penalty state stays at the step's start (drafts not counted: SGLang #33643's class)
    stale = _step_law(target, draft, spec, prompt, lambda p, output: Prefix(p, []))
    want = _target_law(target, spec, prompt, K + 1)
    got = _completed(correct, target, spec, prompt, K + 1)
    wrong = _completed(stale, target, spec, prompt, K + 1)
    assert max(abs(got[s] - want[s]) for s in want) < 1e-12
    assert max(abs(wrong[s] - want[s]) for s in want) > 1e-3


# ---------------------------------------------------------------------------------- stop strings
def test_the_output_ends_at_the_first_stop_and_its_text_before_it():
    pieces = ["He", "llo", " EN", "D th", "ere"]
    decode = lambda ids: "".join(pieces[i] for i in ids)  # noqa: E731
    assert cut_at_stop([0, 1, 2, 3, 4], decode, ["END", "ere"]) == (4, "Hello ")
    assert cut_at_stop([0, 1], decode, ["END"]) is None
    assert cut_at_stop([0, 1, 2, 3, 4], decode, []) is None


def test_a_generation_cut_at_a_stop_keeps_nothing_after_it():
    from specaudit.decoding import Generation
    from specaudit.decoding.stops import apply_stops

    pieces = ["a", "b", "STO", "P", "c", "d"]
    decode = lambda ids: "".join(pieces[i] for i in ids)  # noqa: E731
    generation = Generation(tokens=[0, 1, 2, 3, 4, 5], finish_reason="length", wall_s=0.0, ttft_s=0.0, steps=2, step_pit=[[0.1, 0.2]] * 6)
    text = apply_stops(generation, decode(generation.tokens), decode, ["STOP"])
    assert (generation.tokens, text, generation.finish_reason, len(generation.step_pit)) == ([0, 1, 2, 3], "ab", "stop", 4)
