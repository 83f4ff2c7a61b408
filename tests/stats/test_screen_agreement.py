"""stats.screen_agreement compares like with like: one engine run's rate against the screen's
expectation of one run's rate, not against the ratio of expected counts (which one run's rate
exceeds on average, by Jensen's inequality); and, given the engine's own paths, its accepted drafts
against the mean and variance the screen's programme gives them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specaudit.stats.acceptance import accepted_on_path, expected_counts, expected_run_rate, run_rate_moments, sample_run
from specaudit.stats.screen_agreement import screen_agreement

K, BUDGET, PROMPTS = 4, 16, 60


def _records(paths, rng):
    rows = []
    for i, accept in enumerate(paths):
        steps, proposed, accepted, _ = expected_counts(accept, K, BUDGET)
        base = {"prompt_id": f"p{i}", "k": K, "timing_only": False}
        rows.append({**base, "engine": "screen", "accepted": accepted, "proposed": proposed, "steps": steps,
                     "position_accept": accept, "screen": {"counts": "expected"}})  # fmt: skip
        run_accepted, run_proposed = sample_run(accept, K, BUDGET, rng)
        rows.append({**base, "engine": "speculative", "accepted": sum(run_accepted), "proposed": sum(run_proposed)})
    return pd.DataFrame(rows)


@pytest.mark.slow
def test_screen_agreement_compares_one_run_with_one_run():
    rng = np.random.default_rng(0)
    # Low, uneven acceptance: one run's rate is far from the ratio of expectations here.
    paths = [rng.uniform(0.2, 1.0, size=BUDGET).tolist() for _ in range(PROMPTS)]
    ratios, alarms, jensen = [], 0, []
    for _ in range(200):
        frame = _records(paths, rng)
        check = screen_agreement(frame, BUDGET)
        ratios.append(check["engine_over_screen_acceptance"]["value"])
        alarms += not check["agrees"]
        engine, screen = frame[frame.engine == "speculative"], frame[frame.engine == "screen"]
        jensen.append((engine.accepted / engine.proposed).mean() / (screen.accepted / screen.proposed).mean())
    # Against E[accepted] / E[proposed] an exact engine would look 8% fast ...
    assert np.mean(jensen) > 1.05
    # ... against E[accepted / proposed] it matches (within 4 standard errors of the mean of 200
    # audits), and the check is calibrated (5% nominal; 99.9% binomial range for 200 audits: 1-21).
    assert abs(np.mean(ratios) - 1.0) < 4 * np.std(ratios) / np.sqrt(len(ratios))
    assert alarms <= 21


def test_sample_run_follows_the_law_the_programmes_average():
    rng = np.random.default_rng(1)
    accept = rng.uniform(0.2, 1.0, size=BUDGET).tolist()
    runs = np.array([[sum(part) for part in sample_run(accept, K, BUDGET, rng)] for _ in range(20_000)], dtype=float)
    _, proposed, accepted, _ = expected_counts(accept, K, BUDGET)
    rates = runs[:, 0] / runs[:, 1]
    se = lambda x: x.std() / np.sqrt(len(x))  # noqa: E731
    assert abs(runs[:, 0].mean() - accepted) < 4 * se(runs[:, 0])
    assert abs(runs[:, 1].mean() - proposed) < 4 * se(runs[:, 1])
    assert abs(rates.mean() - expected_run_rate(accept, K, BUDGET)) < 4 * se(rates)
    mean, variance = run_rate_moments(accept, K, BUDGET)
    assert mean == pytest.approx(expected_run_rate(accept, K, BUDGET))
    # the variance of a variance estimate from n draws is about 2 var^2 / n (a little more for skewed rates)
    assert abs(rates.var() - variance) < 5 * variance * np.sqrt(2 / len(rates))


def test_accepted_on_path_counts_only_drafts_inside_the_emitted_tokens():
    # steps accept 4, 2, 4: positions 0-3 accepted, 4 is the verifier's, 5-6 accepted, 7 the verifier's ...
    assert accepted_on_path([4, 2, 4], 32) == 10
    assert accepted_on_path([4, 2, 4], 6) == 5  # the run stopped at an end-of-sequence token at position 5
    assert accepted_on_path([4, 2, 4], 5) == 4


def _audit(rng, *, lift: float = 0.0, easier: float = 0.0):
    """One simulated audit with path-to-path variation: per prompt, the screen's record and the
    engine's run each follow their own path. The engine accepts a share `lift` of the drafts the
    screen's model says it rejects (a model error), or its paths are `easier` to draft than the
    screen's (a difference in the paths, the model right along each)."""
    rows, path_accept = [], {}
    for i in range(44):
        level = rng.uniform(0.75, 0.95)  # the prompt's; each path shifts it, and each position again
        screen_path, engine_path = (
            np.clip(level + shift + rng.normal(0, 0.08) + rng.normal(0, 0.2, BUDGET), 0, 1).tolist() for shift in (0.0, easier)
        )
        steps, proposed, accepted, _ = expected_counts(screen_path, K, BUDGET)
        base = {"prompt_id": f"p{i}", "k": K, "timing_only": False, "output_token_ids": [0] * BUDGET}
        rows.append({**base, "engine": "screen", "accepted": accepted, "proposed": proposed, "steps": steps,
                     "position_accept": screen_path, "screen": {"counts": "expected"}})  # fmt: skip
        run = sample_run([a + lift * (1 - a) for a in engine_path], K, BUDGET, rng)
        rows.append({**base, "engine": "speculative", "key": f"p{i}|speculative", "accepted": sum(run[0]),
                     "proposed": sum(run[1]), "accepted_per_step": run[0]})  # fmt: skip
        path_accept[f"p{i}|speculative"] = engine_path
    return screen_agreement(pd.DataFrame(rows), BUDGET, path_accept)


@pytest.mark.slow
def test_the_check_given_the_engine_paths_is_calibrated_and_tells_the_model_from_the_paths():
    rng = np.random.default_rng(3)
    rejects = lambda checks, test: sum(c[test]["pvalue"] < 0.05 for c in checks)  # noqa: E731
    null = [_audit(rng) for _ in range(200)]
    # 5% nominal each; 99.9% binomial range for 200 audits: 1-21
    assert rejects(null, "given_engine_paths") <= 21 and sum(not c["agrees"] for c in null) <= 21
    # the engine accepts more than the model says along its own paths: found, and named as the model
    lifted = [_audit(rng, lift=0.35) for _ in range(50)]
    assert rejects(lifted, "given_engine_paths") >= 45
    assert all("does not reproduce" in c["finding"] for c in lifted if c["given_engine_paths"]["pvalue_holm"] < 0.05)
    # the engine's paths are easier than the screen's, the model right along each: the same-prompts
    # test sees it, the test along the engine's paths does not, and the finding says so
    easier = [_audit(rng, easier=0.08) for _ in range(50)]
    assert rejects(easier, "engine_over_screen_acceptance") >= 30 and rejects(easier, "given_engine_paths") <= 8
    assert any("no error of the acceptance model is shown" in c.get("finding", "") for c in easier)


def test_drafts_accepted_past_the_end_of_sequence_are_not_counted_for_the_engine():
    # Each run ended at an end-of-sequence token at position 6 (7 tokens); its second step drafted
    # positions 5-8 and accepted 3, one of them past the end, where the screen's path has no a_t.
    rows, path_accept = [], {}
    for prompt, level in (("p0", 0.9), ("p1", 0.8)):
        accept = [level] * 7
        base = {"prompt_id": prompt, "k": K, "timing_only": False, "output_token_ids": [0] * 7}
        steps, proposed, accepted, _ = expected_counts(accept, K, BUDGET)
        rows.append({**base, "engine": "screen", "accepted": accepted, "proposed": proposed, "steps": steps,
                     "position_accept": accept, "screen": {"counts": "expected"}})  # fmt: skip
        rows.append({**base, "engine": "speculative", "key": f"{prompt}|s", "accepted": 7, "proposed": 8,
                     "accepted_per_step": [4, 3], "proposed_per_step": [4, 4]})  # fmt: skip
        path_accept[f"{prompt}|s"] = accept
    check = screen_agreement(pd.DataFrame(rows), BUDGET, path_accept)
    means = [run_rate_moments(path_accept[f"{p}|s"], K, BUDGET)[0] for p in ("p0", "p1")]
    assert check["engine_over_screen_acceptance"]["value"] == pytest.approx(0.75 / np.mean(means))  # 6 of 8, not 7 of 8
    assert check["given_engine_paths"]["value"] == pytest.approx(1.5 / sum(means))
