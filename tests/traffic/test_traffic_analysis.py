"""The adjusted comparison and the anytime-valid checks on simulated traffic where the truth is known."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from specaudit.cli import main
from specaudit.traffic import evaluate, ingest, open_traffic_store
from specaudit.traffic._sequential import holm, one_sided_p, radius
from specaudit.traffic.simulate import TrafficModel, simulate, write_log


def store_of(tmp_path, model, n=4000, seed=0):
    log = write_log(tmp_path / "sim.jsonl", simulate(model, n, seed=seed))
    store = open_traffic_store(tmp_path / "t.db")
    ingest(store, [str(log)])
    return store


def by(result, kind, group, metric="acceptance"):
    return next(c for c in result.checks if (c.kind, c.group, c.metric) == (kind, group, metric))


def test_a_pure_length_confound_is_not_flagged(tmp_path):
    # fr sends prompts 4x longer, and acceptance falls with prompt length for everyone: no group effect.
    with store_of(tmp_path, TrafficModel(prompt_median={"fr": 800.0}, length_slope=-0.08)) as store:
        result = evaluate(store, baseline_requests=0)
    fr = by(result, "disparity", "fr")
    assert fr.crude_ratio < 0.8  # unadjusted, fr looks like a disparity
    assert 0.9 < fr.ratio < 1.1 and not fr.alert
    assert not result.alerts


def test_a_real_group_effect_is_flagged_beside_the_confound(tmp_path):
    model = TrafficModel(prompt_median={"fr": 800.0}, length_slope=-0.08, group_effect={"zh": 0.6})
    with store_of(tmp_path, model) as store:
        result = evaluate(store, baseline_requests=0)
    assert by(result, "disparity", "zh").alert
    assert not by(result, "disparity", "fr").alert


def test_drift_after_a_planted_change_and_not_without(tmp_path):
    with store_of(tmp_path, TrafficModel(change_at=0.5, change_effect=0.7, change_groups=("fr",))) as store:
        changed = evaluate(store, baseline_requests=2000)
    assert by(changed, "drift", "fr").alert
    assert [c.group for c in changed.alerts if c.metric == "acceptance"] == ["fr"]
    (tmp_path / "t.db").unlink()
    with store_of(tmp_path, TrafficModel(), seed=1) as store:
        steady = evaluate(store, baseline_requests=2000)
    assert not steady.alerts


def test_check_cli_exit_codes_alert_file_and_prometheus(tmp_path):
    store_of(tmp_path, TrafficModel(change_at=0.5, change_effect=0.7), n=3000).__exit__()
    alerts, prom = tmp_path / "alerts.jsonl", tmp_path / "traffic.prom"
    args = ["traffic", "check", "--store", str(tmp_path / "t.db"), "--baseline-requests", "1500"]
    assert main([*args, "--alert-file", str(alerts), "--metrics-file", str(prom)]) == 1
    assert '"kind": "drift"' in alerts.read_text()
    assert 'specaudit_traffic_alert{kind="drift",group_by="language",group="en",metric="acceptance"} 1' in prom.read_text()
    assert main([*args, "--baseline-requests", "0"]) == 0  # no drift check: no alert
    assert main([*args, "--adjust", "length"]) == 2
    assert main(["traffic", "check", "--store", str(tmp_path / "none.db")]) == 2


def test_holm():
    assert holm(np.array([0.01, 0.04, 0.03]), 0.05).tolist() == [True, False, False]
    assert holm(np.array([0.01, 0.02, 0.03]), 0.05).tolist() == [True, True, True]


def gaussian_looks(rng, runs, looks, drift):
    """Running estimates of a mean from unit-variance increments: (d, se) at each look."""
    steps = rng.normal(drift, 1.0, size=(runs, looks))
    n = np.arange(1, looks + 1)
    return steps.cumsum(axis=1) / n, 1 / np.sqrt(n)


@pytest.mark.parametrize("alpha", [0.05, 0.2])
def test_false_alarms_over_many_looks_stay_below_alpha(alpha):
    rng = np.random.default_rng(7)
    d, se = gaussian_looks(rng, runs=400, looks=2000, drift=0.0)
    p = one_sided_p(d, se, 0.0, below=True, tau=0.1)
    false_alarm = (p.min(axis=1) <= alpha).mean()
    # A fixed-sample test looked at 2,000 times would alarm in most runs; the bound holds over all looks.
    naive = (d / se < norm.ppf(alpha)).any(axis=1).mean()
    assert false_alarm <= alpha and naive > 3 * alpha


def test_power_a_shift_is_detected_and_the_sequence_covers():
    rng = np.random.default_rng(8)
    d, se = gaussian_looks(rng, runs=200, looks=2000, drift=-0.15)
    p = one_sided_p(d, se, 0.0, below=True, tau=0.1)
    assert (p.min(axis=1) <= 0.05).mean() > 0.95
    half = radius(se, 0.05, tau=0.1)
    assert ((d - half <= -0.15) & (-0.15 <= d + half)).all(axis=1).mean() >= 0.95


def test_fallback_rule_routes_the_low_acceptance_requests_and_prices_them(tmp_path, capsys):
    import json

    def line(i, tenant, proposed, accepted, output):
        return {
            "time": f"2026-01-01T00:00:{i:02d}Z",
            "request": {"prompt": "x"},
            "response": {
                "usage": {"prompt_tokens": 5, "completion_tokens": output},
                "timings": {"draft_n": proposed, "draft_n_accepted": accepted},
            },
            "latency_s": 1.0,
            "labels": {"tenant": tenant},
        }

    # k = 4, c = 0, v = 1: a request costs proposed / 4 steps speculatively, `output` plainly.
    lines = [line(0, "a", 40, 4, 14), line(1, "a", 40, 36, 46), line(2, "b", 40, 32, 42), line(3, "b", 40, 30, 40)]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    db = str(tmp_path / "t.db")
    assert main(["traffic", "ingest", str(tmp_path / "log.jsonl"), "--store", db]) == 0
    assert main(["traffic", "fallback", "--store", db, "--group-by", "label:tenant", "--c", "0", "--v", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    a = next(x for x in out if x.strip().startswith("a "))
    b = next(x for x in out if x.strip().startswith("b "))
    # a's first request (acceptance 0.1) is routed: 10 speculative steps vs 14 plain: -4 steps, -4/20 of a's time.
    assert "50.0%" in a and "-4.00" in a and "-20.0%" in a
    assert "0.0%" in b


def test_mitigate_policies_on_traffic_route_the_slow_group_and_retune_the_fast_one(tmp_path, capsys):
    import json

    from specaudit.stats.advice import acceptance_rate_from_alpha, best_draft_length
    from specaudit.traffic import open_traffic_store
    from specaudit.traffic._fallback import evaluate_policies

    def line(i, tenant, proposed, accepted, output):
        return {
            "time": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
            "response": {"usage": {"completion_tokens": output}, "timings": {"draft_n": proposed, "draft_n_accepted": accepted}},
            "latency_s": 1.0,
            "labels": {"tenant": tenant},
        }

    # Served at k = 4 with c = 0.3, v = 1: "slow" keeps 10% of its drafts, "fast" 80% (output = steps + kept drafts).
    lines = [line(i, "slow", 40 + 4 * (i % 2), 4, 14 + i % 2) for i in range(20)]
    lines += [line(20 + i, "fast", 40, 32, 42) for i in range(20)]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    db = str(tmp_path / "t.db")
    assert main(["traffic", "ingest", str(tmp_path / "log.jsonl"), "--store", db]) == 0
    with open_traffic_store(db, create=False) as store:
        rows = {r.group: r for r in evaluate_policies(store, group_by="label:tenant", k=4, c=0.3, v=1.0)}
    slow, fast = rows["slow"], rows["fast"]
    assert fast.acceptance == pytest.approx(0.8) and slow.acceptance == pytest.approx(80 / 840)
    assert acceptance_rate_from_alpha(fast.alpha, 4) == pytest.approx(0.8, abs=1e-9)
    best_k, best = best_draft_length(fast.alpha, 0.3, 8, 1.0)
    assert fast.policy == f"k={best_k}" and fast.speedup_policy == pytest.approx(best)
    assert fast.saving_share_of_total == pytest.approx(1 - fast.speedup_served / best) and fast.saving_share_of_total >= 0
    # "slow" goes to plain decoding; priced on its own requests: speculative proposed / 4 · (1 + 4 · 0.3) vs output plainly.
    assert slow.policy == "plain" and slow.speedup_served < 1
    speculative = sum((40 + 4 * (i % 2)) / 4 * 2.2 for i in range(20))
    plain = sum(14 + i % 2 for i in range(20))
    assert slow.saving_share_of_total == pytest.approx((speculative - plain) / speculative) and slow.saving_share_of_total > 0
    assert main(["traffic", "fallback", "--store", db, "--group-by", "label:tenant", "--c", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "mitigate's per-group policies" in out and "plain" in out and f"k={best_k}" in out


# Hand edits of a store (SQLite keeps text in a REAL column): a command that reads an edited row refuses
# it in one sentence naming the store; one that does not read it (the roll-up holds its sums) runs.
EDITS = [
    ("UPDATE traffic_requests SET labels = '{not json'", "labels '{not json' are not a JSON object"),
    ("UPDATE traffic_requests SET labels = '[1, 2]'", "labels '[1, 2]' are not a JSON object"),
    ('UPDATE traffic_requests SET labels = \'{"tenant": {"x": 1}}\'', "not a JSON object of names to strings"),
    ("UPDATE traffic_requests SET time = 'soon'", "but the store holds"),  # outside every hour the roll-up counts
    ("UPDATE traffic_requests SET accepted = 'many'", "its accepted column holds 'many'"),
    ("UPDATE traffic_requests SET proposed = 1e999", "its proposed column holds inf"),
    ("UPDATE traffic_rollup SET labels = 'x' WHERE rowid = 1", None),  # SQLite reads it as labels without the one asked for
    ("DROP TABLE traffic_rollup", None),  # rebuilt from the requests
]


@pytest.mark.parametrize("edit, words", EDITS, ids=[e for e, _ in EDITS])
def test_a_hand_edited_store_is_one_sentence_and_exit_2(tmp_path, capsys, edit, words):
    import sqlite3

    model = TrafficModel(groups=("a", "b"), shares=(0.5, 0.5))
    lines = [{**x, "labels": {"tenant": x["labels"]["language"]}} for x in simulate(model, 400, seed=1)]
    db = str(tmp_path / "t.db")
    assert main(["traffic", "ingest", str(write_log(tmp_path / "sim.jsonl", lines)), "--store", db]) == 0
    with sqlite3.connect(db) as conn:
        conn.execute(edit)
    codes = []
    for argv in (["report", "--baseline-requests", "150"], ["check", "--baseline-requests", "150"], ["fallback"]):
        codes.append(main(["traffic", *argv, "--store", db, "--group-by", "label:tenant"]))
        err = capsys.readouterr().err
        assert codes[-1] in (0, 1, 2) and "Traceback" not in err
        if codes[-1] == 2:
            assert words is not None and words in err and err.count("\n") == 1, (argv, err)
    assert (2 in codes) == (words is not None)
