"""analysis.screen_agreement compares like with like: one engine run's rate against the screen's
expectation of one run's rate, not against the ratio of expected counts (which one run's rate
exceeds on average, by Jensen's inequality)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from specaudit.analysis import screen_agreement
from specaudit.screen import expected_counts, expected_run_rate, sample_run

K, BUDGET, PROMPTS = 4, 16, 60


def _records(paths, rng):
    rows = []
    for i, accept in enumerate(paths):
        steps, proposed, accepted, _ = expected_counts(accept, K, BUDGET)
        base = {"prompt_id": f"p{i}", "k": K, "timing_only": False}
        rows.append({**base, "engine": "screen", "accepted": accepted, "proposed": proposed, "steps": steps,
                     "position_accept": accept, "screen": {"counts": "expected"}})  # fmt: skip
        run_accepted, run_proposed = sample_run(accept, K, BUDGET, rng)
        rows.append({**base, "engine": "speculative", "accepted": run_accepted, "proposed": run_proposed})
    return pd.DataFrame(rows)


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
    runs = np.array([sample_run(accept, K, BUDGET, rng) for _ in range(20_000)], dtype=float)
    _, proposed, accepted, _ = expected_counts(accept, K, BUDGET)
    rates = runs[:, 0] / runs[:, 1]
    se = lambda x: x.std() / np.sqrt(len(x))  # noqa: E731
    assert abs(runs[:, 0].mean() - accepted) < 4 * se(runs[:, 0])
    assert abs(runs[:, 1].mean() - proposed) < 4 * se(runs[:, 1])
    assert abs(rates.mean() - expected_run_rate(accept, K, BUDGET)) < 4 * se(rates)
