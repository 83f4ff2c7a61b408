"""The concurrency section of analyze (specaudit.analysis.concurrency): equivalence per level, and
acceptance / latency / speed-up per group x level. Records are written as a llama-server run
writes them (a `concurrency` field on each), decoded greedily by a tiny real model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specaudit.analysis.concurrency import concurrency_section, group_metrics, split_alpha
from specaudit.analysis.equivalence import Battery
from specaudit.analysis.snapshot import judge_by_level
from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.contracts.snapshot import EngineEquivalence, EquivalenceSection
from specaudit.contracts.status import CheckStatus


def _greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            ids.append(int(logits.argmax()))
    return ids[len(prompt) :]


def _least_likely_first(model, prompt: list[int]) -> int:
    with torch.no_grad():
        return int(model(input_ids=torch.tensor([prompt])).logits[0, -1].argmin())


def _record(engine, prompt_id, sample, level, prompt, output, group, **extra):
    return {
        "key": f"{prompt_id}|{engine}|{sample}",
        "prompt_id": prompt_id,
        "attributes": {"group": group},
        "engine": engine,
        "sample": sample,
        "timing_only": False,
        "sampling": {"temperature": 0.0, "top_k": 0, "top_p": 1.0},
        "prompt_token_ids": prompt,
        "output_token_ids": output,
        "concurrency": level,
        **extra,
    }


@pytest.fixture(scope="module")
def batched_only_bug(tiny_pair):
    """Greedy records at concurrency 1 and 2: the speculative side is exact alone, and at level 2
    emits the least likely first token on one prompt (a sampler wrong only in a batch)."""
    model = tiny_pair.target
    prompts = {"p1": [5, 9, 14, 20], "p2": [7, 7, 30, 41, 12], "p3": [11, 3, 25]}
    records = []
    for level, sample in ((1, 0), (2, 1)):
        for index, (prompt_id, prompt) in enumerate(prompts.items()):
            greedy = _greedy(model, prompt, 6)
            group = "a" if index < 2 else "b"
            records.append(_record(CONTROL_ENGINE, prompt_id, sample, level, prompt, greedy, group))
            output = list(greedy)
            if level == 2 and prompt_id == "p2":
                output = [_least_likely_first(model, prompt), *greedy[1:]]
            records.append(_record(SPECULATIVE_ENGINE, prompt_id, sample, level, prompt, output, group))
    return records


def test_a_sampler_wrong_only_in_a_batch_fails_at_that_level(tiny_pair, batched_only_bug):
    section = concurrency_section(batched_only_bug, Battery(tiny_pair, 0.05, 0.05, ["group"], 0, n_boot=200, equivalence=True))
    assert section.levels == [1, 2]
    assert (section.pooled_alpha, section.level_alpha, section.independence_alpha) == pytest.approx((0.05 / 3, 0.05 / 6, 0.05 / 3))
    assert section.equivalence["1"].status == CheckStatus.PASS
    assert section.equivalence["2"].status == CheckStatus.FAIL
    assert section.failed_levels == [2] and section.control_failed_levels == []
    assert "equivalence fails at concurrency 2 of 1, 2" in section.message


def test_alpha_is_split_over_the_three_families_and_their_levels():
    # Bonferroni: the pooled battery, every level's battery and every level's independence tests
    # together spend alpha, so a correct server is failed at most alpha of the time
    for levels in ([1, 4], [1, 4, 16], [2, 8, 32, 64]):
        split = split_alpha(0.05, levels)
        spent = split.pooled + len(levels) * split.level + (len(levels) - 1) * split.independence
        assert spent == pytest.approx(0.05)
    one = split_alpha(0.05, [4])  # one level: the level's battery is the pooled one, nothing to split
    assert (one.pooled, one.level) == (0.05, 0.05)
    assert split_alpha(0.05, []).pooled == 0.05  # a run without levels: the pooled battery alone


def test_a_failed_level_fails_the_runs_equivalence_naming_it(tiny_pair, batched_only_bug):
    pooled_pass = EquivalenceSection(
        status=CheckStatus.PASS,
        engines={SPECULATIVE_ENGINE: EngineEquivalence(verdict=CheckStatus.PASS, status="no violation found")},
    )
    section = concurrency_section(batched_only_bug, Battery(tiny_pair, 0.05, 0.05, ["group"], 0, n_boot=200, equivalence=True))
    judged = judge_by_level(pooled_pass, section)
    assert judged.status == CheckStatus.FAIL and pooled_pass.status == CheckStatus.PASS  # a new section; the pooled one is as it was
    assert judged.failed_concurrency_levels == [2]
    assert judged.engines[SPECULATIVE_ENGINE].verdict == CheckStatus.FAIL
    assert "concurrency 2" in judged.engines[SPECULATIVE_ENGINE].status_reason
    assert judge_by_level(pooled_pass, None) is pooled_pass  # no levels: nothing to judge


def test_the_correct_server_passes_at_every_level(tiny_pair, batched_only_bug):
    fixed = [dict(r) for r in batched_only_bug]
    for r in fixed:
        if r["engine"] == SPECULATIVE_ENGINE:
            r["output_token_ids"] = next(
                c["output_token_ids"]
                for c in fixed
                if c["engine"] == CONTROL_ENGINE and c["prompt_id"] == r["prompt_id"] and c["sample"] == r["sample"]
            )
    section = concurrency_section(fixed, Battery(tiny_pair, 0.05, 0.05, ["group"], 0, n_boot=200, equivalence=True))
    assert section.failed_levels == [] and section.message is None


def _timed(engine, prompt_id, sample, level, wall, tokens=10, accepted=0, proposed=0):
    return _record(
        engine, prompt_id, sample, level, [1], list(range(tokens)), "a", wall_s=wall, ttft_s=wall / 10, accepted=accepted, proposed=proposed
    )


def test_metrics_per_level_and_the_crossover():
    rng = np.random.default_rng(0)
    records = []
    for i in range(12):
        prompt = f"p{i}"
        # Level 1: speculation 2x faster; level 8: 1.5x slower (the batch is compute-bound).
        off = 1.0 + 0.1 * rng.random()
        records += [_timed(CONTROL_ENGINE, prompt, 0, 1, off), _timed(SPECULATIVE_ENGINE, prompt, 0, 1, off / 2, accepted=6, proposed=8)]
        records += [_timed(CONTROL_ENGINE, prompt, 1, 8, off), _timed(SPECULATIVE_ENGINE, prompt, 1, 8, off * 1.5, accepted=2, proposed=8)]
    section = concurrency_section(records, Battery(None, 0.05, 0.05, ["group"], 0, n_boot=300, equivalence=False))
    one, eight = section.groups["group"]["a"]["1"], section.groups["group"]["a"]["8"]
    assert one.acceptance.estimate == pytest.approx(0.75) and eight.acceptance.estimate == pytest.approx(0.25)
    assert one.speedup.ci_low > 1.0 and eight.speedup.ci_high < 1.0
    assert section.crossover["group"]["a"] == 8 and section.crossover["all"]["all"] == 8
    assert one.speculative.tokens_per_s.estimate > one.vanilla.tokens_per_s.estimate
    # a prompt of another dimension (no `group` attribute) joins no group of this one, not a group "None"
    other = [{**r, "attributes": {"domain": "code"}} for r in records[:4]]
    section = concurrency_section(records + other, Battery(None, 0.05, 0.05, ["group", "domain"], 0, n_boot=50, equivalence=False))
    assert set(section.groups["group"]) == {"a"} and set(section.groups["domain"]) == {"code"}


def test_group_without_pairs_has_no_speedup():
    metrics = group_metrics([_timed(SPECULATIVE_ENGINE, "p", 0, 1, 1.0, accepted=1, proposed=4)], n_boot=50, seed=0)
    assert metrics["speedup"] is None and metrics["acceptance"]["estimate"] == 0.25


# ----------------------------------------------------------------------------- logprob parity
def _lp(engine, prompt_id, sample, level, output, logprobs):
    return {**_record(engine, prompt_id, sample, level, [1], output, "a"), "server_logprobs": logprobs}


def _parity_records(speculative_logprobs):
    """Vanilla at levels 1 and 2 (same greedy path, batch noise up to 0.004 nats) and speculative pairs."""
    out = [4, 8, 15, 16]
    target = [-0.5, -1.25, -0.1, -2.0]
    noisy = [v + d for v, d in zip(target, [0.004, -0.002, 0.0, 0.001])]
    return [
        _lp(CONTROL_ENGINE, "p", 0, 1, out, target),
        _lp(CONTROL_ENGINE, "p", 1, 2, out, noisy),
        _lp(SPECULATIVE_ENGINE, "p", 0, 1, out, speculative_logprobs[0]),
        _lp(SPECULATIVE_ENGINE, "p", 1, 2, out, speculative_logprobs[1]),
    ]


def test_logprob_parity_passes_within_measured_batch_noise():
    from specaudit.analysis.logprob_parity import logprob_parity

    section = logprob_parity(_parity_records([[-0.5, -1.25, -0.1, -2.0], [-0.497, -1.251, -0.1, -1.999]]))
    assert section.status == CheckStatus.PASS and section.positions == 8
    assert section.batch_noise.max_abs_diff == pytest.approx(0.004) and section.threshold == pytest.approx(0.01)


def test_logprob_zero_for_drafted_tokens_is_found():
    from specaudit.analysis.logprob_parity import logprob_parity

    section = logprob_parity(_parity_records([[-0.5, 0.0, 0.0, -2.0], [-0.5, -1.25, 0.0, 0.0]]))
    assert section.status == CheckStatus.FAIL and (section.differing, section.zero_logprob) == (4, 4)
    assert section.by_concurrency == {"1": {"positions": 4, "differing": 2}, "2": {"positions": 4, "differing": 2}}
    assert "not the target's" in section.message and "exactly 0.0" in section.message


def test_emitted_logprobs_follow_the_output_or_are_refused():
    from specaudit.engines.llama_server.client import emitted_logprobs

    answer = {"completion_probabilities": [{"id": 4, "logprob": -0.5, "top_logprobs": []}, {"id": 8, "logprob": -3.4028234663852886e38}]}
    assert emitted_logprobs(answer, [4, 8]) == [-0.5, None]  # llama-server's lowest float is zero probability
    assert emitted_logprobs(answer, [4, 9]) is None  # not aligned with the output: not used
    assert emitted_logprobs({}, [4]) is None


def test_too_few_prompts_give_no_interval_and_no_crossover():
    records = []
    for i in range(2):
        records += [_timed(CONTROL_ENGINE, f"p{i}", 0, 4, 1.0), _timed(SPECULATIVE_ENGINE, f"p{i}", 0, 4, 3.0, accepted=1, proposed=4)]
    section = concurrency_section(records, Battery(None, 0.05, 0.05, [], 0, n_boot=100, equivalence=False))
    speedup = section.groups["all"]["all"]["4"].speedup
    assert speedup.estimate == pytest.approx(1 / 3) and speedup.ci_high is None
    assert section.crossover["all"]["all"] is None
