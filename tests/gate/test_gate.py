"""The deployment gate: thresholds, each check's PASS / WARN / FAIL, exit codes, and the CLI.

Variants of a real snapshot (tests/conftest.py) are made by editing a copy the way a
real failure would show up in it: a Holm-rejected test, an impossible token, a failed control,
a group significantly outside the band, a slowed-down group.
"""

from __future__ import annotations

import json

import pytest
import yaml

from specaudit.cli import main
from specaudit.contracts import EquivalenceStatus
from specaudit.errors import InputError
from specaudit.gate import FAIL, PASS, WARN, GateThresholds, evaluate_gate, load_thresholds

# Thresholds under which only the check in question can fail; the exit code follows the checks alone
# (the tiny pair decodes slower than vanilla, which makes the decision Do not enable: gate.decision).
LOOSE = dict(tv_delta=0.99, band_low=0.01, min_speedup=0.001, min_group_size=1, fail_on="fail")


def _check(result, name):
    matches = [c for c in result.checks if c.name == name]
    assert len(matches) == 1, [c.name for c in result.checks]
    return matches[0]


def _dimension(snapshot):
    return next(iter(snapshot["disparities"]))


def _other_group(snapshot):
    dim = _dimension(snapshot)
    return next(iter(snapshot["disparities"][dim]["metrics"]["acceptance_rate"]["pairwise"]))


# ---------------------------------------------------------------------------- thresholds
@pytest.mark.parametrize(
    "field, value",
    [
        ("alpha", 0.0),
        ("alpha", 1.0),
        ("alpha", -0.1),
        ("alpha", "0.05"),
        ("tv_delta", 0.0),
        ("tv_delta", 1.5),
        ("band_low", 0.0),
        ("band_low", 1.5),
        ("band_high", 0.9),
        ("band_high", float("inf")),
        ("min_speedup", 0.0),
        ("min_speedup", -1.0),
        ("min_speedup", float("nan")),
        ("min_group_size", 0),
        ("min_group_size", 2.5),
        ("min_group_size", True),
        ("disparity_severity", "maybe"),
        ("tv_severity", "error"),
        ("slowdown_severity", None),
        ("disparity_metrics", []),
        ("disparity_metrics", [""]),
    ],
)
def test_impossible_thresholds_name_the_field(field, value):
    with pytest.raises(InputError, match=f"gate.{field}"):
        GateThresholds(**{field: value})


def test_threshold_messages_name_the_field_the_range_and_the_meaning():
    with pytest.raises(InputError) as err:
        GateThresholds(band_low=1.5)
    assert (
        str(err.value)
        == "gate.band_low must be a number in (0, 1], got 1.5 (the lowest acceptable ratio of a group to the reference, e.g. 0.8)"
    )
    with pytest.raises(InputError, match=r"^gate.alpha must be a number in \(0, 1\), got '0.05'"):
        GateThresholds(alpha="0.05")  # strict types: a quoted number in YAML is refused, not read as a number
    with pytest.raises(InputError, match=r"^gate.tv_severity must be one of 'warn' or 'fail', got 'error'$"):
        GateThresholds(tv_severity="error")
    with pytest.raises(InputError, match=r"^unknown gate setting\(s\) minimum_speedup; known: alpha, "):
        GateThresholds(minimum_speedup=1.0)


def test_the_default_band_is_the_contracts_one():
    from specaudit.config import AnalysisSettings
    from specaudit.contracts import DEFAULT_BAND

    assert GateThresholds().band(None) == DEFAULT_BAND
    assert AnalysisSettings().tolerance == DEFAULT_BAND
    assert AnalysisSettings(band="0.7,1.5").tolerance == (0.7, 1.5)


def test_threshold_defaults_and_band():
    t = GateThresholds()
    assert (t.alpha, t.tv_delta, t.disparity_severity, t.tv_severity, t.min_speedup, t.min_group_size) == (None, None, FAIL, WARN, 1.0, 4)
    assert t.band([0.9, 1.1]) == (0.9, 1.1)  # None: the analysis's band
    assert t.band(None) == (0.8, 1.25)
    assert GateThresholds(band_low=0.8).band([0.9, 1.1]) == pytest.approx((0.8, 1.25))  # Aequitas τ ≤ r ≤ 1/τ
    assert GateThresholds(band_low=0.5, band_high=3.0).band(None) == (0.5, 3.0)
    assert GateThresholds(disparity_metrics="speedup, acceptance_rate").disparity_metrics == ("speedup", "acceptance_rate")


def test_load_thresholds_reads_only_the_gate_section(tmp_path):
    path = tmp_path / "audit.yaml"
    path.write_text(
        yaml.safe_dump({"target": "default", "k": 4, "gate": {"min-speedup": 0.9, "band_low": 0.75, "disparity_severity": "warn"}})
    )
    t = load_thresholds(path)
    assert (t.min_speedup, t.band_low, t.disparity_severity) == (0.9, 0.75, WARN)
    assert load_thresholds(None) == GateThresholds()
    assert load_thresholds({"gate": {"alpha": 0.01}}).alpha == 0.01
    assert load_thresholds({"alpha": 0.01}).alpha == 0.01
    path.write_text("target: default\n")  # no gate section: defaults
    assert load_thresholds(path) == GateThresholds()


@pytest.mark.parametrize(
    "text, message",
    [
        ("gate:\n  band_low: 1.5\n", r"config file .*audit.yaml: gate.band_low must be a number in \(0, 1\]"),
        ("gate:\n  minimum_speedup: 1\n", "unknown gate setting.*minimum_speedup"),
        ("gate: [1, 2]\n", "gate section must be a mapping"),
        ("gate: {alpha: [\n", "not valid YAML"),
    ],
)
def test_bad_gate_config_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "audit.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_thresholds(path)


# ---------------------------------------------------------------------------- the real snapshot
def _passing(snapshot):
    """The real snapshot with every equivalence test made non-rejecting (as a clean run would be)."""
    for entry in snapshot["equivalence"]["engines"].values():
        entry["verdict"] = PASS
        for battery in ("goodness_of_fit", "two_sample"):
            for row in (entry.get(battery) or {}).get("gate", []):
                row.update(holm_pvalue=max(row["holm_pvalue"], 0.5), reject=False)
    snapshot["equivalence"]["status"] = PASS
    return snapshot


def test_gate_agrees_with_the_snapshots_own_verdicts(snapshot):
    result = evaluate_gate(snapshot)  # the analysis and the gate use the same α here
    engines = snapshot["equivalence"]["engines"]
    for engine, entry in engines.items():
        if engine != "vanilla":
            expected = FAIL if entry["verdict"] == FAIL else PASS
            assert _check(result, f"equivalence[{engine}]").status == expected
    assert _check(result, "control[vanilla]").status == (FAIL if engines["vanilla"]["verdict"] == FAIL else PASS)
    assert result.exit_code == (1 if result.status == FAIL else 0)


def test_passing_snapshot_exits_0_with_warnings_and_without(snapshot):
    snapshot = _passing(snapshot)
    result = evaluate_gate(snapshot, GateThresholds(fail_on="fail"))
    names = [c.name for c in result.checks]
    dim = _dimension(snapshot)
    assert names[:2] == ["equivalence[hf-assisted]", "equivalence[speculative]"]
    assert {
        "control[vanilla]",
        "impossible-tokens",
        "tv-bound[speculative]",
        f"disparity[{dim}/acceptance_rate]",
        f"disparity[{dim}/speedup]",
        f"min-speedup[{dim}]",
        f"group-size[{dim}]",
    } <= set(names)
    assert _check(result, "equivalence[speculative]").status == PASS
    assert _check(result, "impossible-tokens").status == PASS
    assert _check(result, f"group-size[{dim}]").status == WARN  # 3 prompts per group < 4
    assert result.status == WARN and result.exit_code == 0
    # by default the exit code follows the decision: every tiny-pair group decodes slower than vanilla
    # (whole interval below 1), so the decision is Do not enable and the `decision` check fails
    default = evaluate_gate(snapshot)
    assert default.decision == "do_not" and _check(default, "decision").status == FAIL and default.exit_code == 1
    assert [c.name for c in default.checks] == [*names, "decision"]
    # 3 prompts a group cannot show parity even in a loose band (the intervals reach 0); once every
    # interval lies inside it, the loose gate passes without a warning.
    for part in snapshot["disparities"].values():
        for block in part["metrics"].values():
            for row in (block.get("pairwise") or {}).values():
                value = row["ratio"]["value"]
                row["ratio"].update(ci_low=0.9 * value, ci_high=1.1 * value)
    loose = evaluate_gate(snapshot, GateThresholds(**LOOSE))
    assert loose.status == PASS and loose.exit_code == 0, loose.format()
    payload = json.loads(json.dumps(result.to_dict()))  # what goes into snapshot["gate"]
    assert payload["status"] == WARN and payload["exit_code"] == 0 and len(payload["checks"]) == len(names)
    assert payload["counts"] == {
        "PASS": sum(c.status == PASS for c in result.checks),
        "WARN": sum(c.status == WARN for c in result.checks),
        "FAIL": 0,
    }


# ---------------------------------------------------------------------------- equivalence checks
def test_holm_rejection_fails_and_is_rejudged_at_the_gates_alpha(snapshot):
    snapshot = _passing(snapshot)
    row = snapshot["equivalence"]["engines"]["speculative"]["goodness_of_fit"]["gate"][0]
    row.update(pvalue=0.001, holm_pvalue=0.004, reject=True)
    result = evaluate_gate(snapshot, GateThresholds(**LOOSE))
    check = _check(result, "equivalence[speculative]")
    assert check.status == FAIL and row["test"] in check.message and result.exit_code == 1
    # the Holm-adjusted p does not depend on α, so a stricter gate re-judges without re-running
    strict = evaluate_gate(snapshot, GateThresholds(**LOOSE, alpha=0.001))
    assert _check(strict, "equivalence[speculative]").status == PASS and strict.exit_code == 0


def test_two_sample_rejection_fails(snapshot):
    snapshot = _passing(snapshot)
    row = snapshot["equivalence"]["engines"]["hf-assisted"]["two_sample"]["gate"][0]
    row.update(holm_pvalue=1e-4, reject=True)
    result = evaluate_gate(snapshot)
    assert _check(result, "equivalence[hf-assisted]").status == FAIL and result.exit_code == 1
    assert _check(result, "equivalence[speculative]").status == PASS


def test_impossible_token_fails(snapshot):
    snapshot = _passing(snapshot)
    block = snapshot["equivalence"]["engines"]["speculative"]["goodness_of_fit"]["impossible_tokens"]
    block.update(statistic=2, pvalue=0.0, verdict="fail", offenders=[{"key": "p1|speculative|0", "position": 3, "token": 7}] * 2)
    result = evaluate_gate(snapshot, GateThresholds(**LOOSE))
    check = _check(result, "impossible-tokens")
    assert check.status == FAIL and "p1|speculative|0" in check.message and "2 emitted token" in check.message
    assert result.exit_code == 1


def test_failed_control_makes_the_audit_invalid(snapshot):
    snapshot["equivalence"]["engines"]["vanilla"]["goodness_of_fit"]["gate"][0].update(holm_pvalue=1e-6, reject=True)
    snapshot["equivalence"]["status"] = "error"
    result = evaluate_gate(snapshot, GateThresholds(**LOOSE))
    check = _check(result, "control[vanilla]")
    assert check.status == FAIL and "invalid" in check.message and result.exit_code == 1


def test_tv_bound_warns_when_not_shown_and_fails_if_configured(snapshot):
    snapshot = _passing(snapshot)
    bound = snapshot["equivalence"]["engines"]["speculative"]["tv_bound"]
    bound.update(upper=0.2, verdict="not shown")
    assert _check(evaluate_gate(snapshot, GateThresholds(tv_delta=0.3)), "tv-bound[speculative]").status == PASS
    warn = evaluate_gate(snapshot, GateThresholds(tv_delta=0.05))
    assert _check(warn, "tv-bound[speculative]").status == WARN and "not shown" in _check(warn, "tv-bound[speculative]").message
    failing = evaluate_gate(snapshot, GateThresholds(**{**LOOSE, "tv_delta": 0.05, "tv_severity": "fail"}))
    assert _check(failing, "tv-bound[speculative]").status == FAIL and failing.exit_code == 1


# the smallest snapshot the contract accepts: every section the gate reads is empty
MINIMAL = {"schema_version": 1, "run": {}, "equivalence": {"status": "not run"}, "groups": {}}


def test_greedy_divergences_fail_only_when_not_near_ties():
    def greedy(classifications):
        divergences = [{"prompt_id": f"p{i}", "position": 2, "classification": c} for i, c in enumerate(classifications)]
        return {
            **MINIMAL,
            "equivalence": {
                "status": "pass",
                "mode": "greedy",
                "alpha": 0.05,
                "control": "vanilla",
                "engines": {
                    "speculative": {
                        "verdict": "pass",
                        "greedy": {"n_pairs": 10, "n_matches": 10 - len(divergences), "divergences": divergences},
                    }
                },
            },
        }

    benign = evaluate_gate(greedy(["near-tie", "near-tie"]))
    assert _check(benign, "equivalence[speculative]").status == PASS
    assert "near-ties" in _check(benign, "equivalence[speculative]").message
    assert _check(benign, "control[vanilla]").status == PASS  # no separate control in greedy mode
    bug = evaluate_gate(greedy(["near-tie", "clear"]))
    assert _check(bug, "equivalence[speculative]").status == FAIL and "p1" in _check(bug, "equivalence[speculative]").message
    assert bug.exit_code == 1


# ---------------------------------------------------------------------------- disparity checks
def _set_pairwise(snapshot, metric, ratio, pvalue_holm, ci=None):
    dim, group = _dimension(snapshot), _other_group(snapshot)
    row = snapshot["disparities"][dim]["metrics"][metric]["pairwise"][group]
    low, high = ci or (ratio * 0.9, ratio * 1.1)
    row["ratio"] = {"value": ratio, "ci_low": low, "ci_high": high}
    row["pvalue_holm"] = pvalue_holm
    return dim, group


def test_significant_disparity_fails_and_inconclusive_warns(snapshot, copy_of):
    snapshot = _passing(snapshot)
    flagged = copy_of(snapshot)
    dim, group = _set_pairwise(flagged, "acceptance_rate", 0.5, 0.001)
    result = evaluate_gate(flagged, GateThresholds(**{**LOOSE, "band_low": None}))
    check = _check(result, f"disparity[{dim}/acceptance_rate]")
    assert check.status == FAIL and group in check.message and "0.50×" in check.message and result.exit_code == 1
    as_warning = evaluate_gate(flagged, GateThresholds(**{**LOOSE, "band_low": None, "disparity_severity": "warn"}))
    assert _check(as_warning, f"disparity[{dim}/acceptance_rate]").status == WARN and as_warning.exit_code == 0
    unclear = copy_of(snapshot)
    _set_pairwise(unclear, "acceptance_rate", 0.5, 0.6, ci=(0.3, 0.9))  # the interval crosses the band edge 0.8
    check = _check(evaluate_gate(unclear, GateThresholds(**{**LOOSE, "band_low": None})), f"disparity[{dim}/acceptance_rate]")
    assert check.status == WARN and "inconclusive" in check.message
    undecidable = copy_of(snapshot)
    _set_pairwise(undecidable, "acceptance_rate", 0.9, 0.6, ci=(0.3, 2.0))  # covers the whole band
    check = _check(evaluate_gate(undecidable, GateThresholds(**{**LOOSE, "band_low": None})), f"disparity[{dim}/acceptance_rate]")
    assert check.status == WARN and "insufficient" in check.message
    # a looser band lets the same group through
    assert _check(evaluate_gate(flagged, GateThresholds(**LOOSE)), f"disparity[{dim}/acceptance_rate]").status == PASS


def test_a_group_far_above_the_reference_is_a_disparity_too(snapshot):
    # if the reference group is the disadvantaged one, every other group sits above the band
    dim, group = _set_pairwise(snapshot, "speedup", 2.0, 0.01)
    check = _check(evaluate_gate(snapshot, GateThresholds(band_low=0.8)), f"disparity[{dim}/speedup]")
    assert check.status == FAIL and group in check.message


def test_slowed_down_group_warns_or_fails(snapshot):
    snapshot = _passing(snapshot)
    dim = _dimension(snapshot)
    for entry in snapshot["groups"][dim]["by_group"].values():
        entry["metrics"]["speedup"].update(value=1.3, ci_low=1.1, ci_high=1.5)
    assert _check(evaluate_gate(snapshot), f"min-speedup[{dim}]").status == PASS
    group = next(iter(snapshot["groups"][dim]["by_group"]))
    snapshot["groups"][dim]["by_group"][group]["metrics"]["speedup"].update(value=0.6, ci_low=0.5, ci_high=0.7)
    warn = _check(evaluate_gate(snapshot), f"min-speedup[{dim}]")
    assert warn.status == WARN and group in warn.message and "interval below" in warn.message
    failing = evaluate_gate(snapshot, GateThresholds(slowdown_severity="fail"))
    assert _check(failing, f"min-speedup[{dim}]").status == FAIL and failing.exit_code == 1


def test_group_size_threshold(snapshot):
    dim = _dimension(snapshot)
    assert _check(evaluate_gate(snapshot, GateThresholds(min_group_size=3)), f"group-size[{dim}]").status == PASS
    check = _check(evaluate_gate(snapshot, GateThresholds(min_group_size=4)), f"group-size[{dim}]")
    assert check.status == WARN and "fewer than 4 audited prompts, the checked group size" in check.message


def test_missing_sections_warn_as_not_run_and_garbage_is_refused():
    for partial in (MINIMAL, {**MINIMAL, "disparities": {}, "equivalence": {"status": "not run", "engines": {}}}):
        result = evaluate_gate(partial)
        *judged, decision = result.checks
        assert judged and all(c.status == WARN and c.message.startswith("not run") for c in judged)
        # nothing to judge: Insufficient evidence, which exits 1 only under --fail-on decision
        assert decision.name == "decision" and decision.status == PASS and result.decision == "insufficient"
        assert result.exit_code == 0 and "--fail-on decision" in result.format()
        assert evaluate_gate(partial, GateThresholds(fail_on="decision")).exit_code == 1
    # the gate reads the typed snapshot: what breaks the contract is one sentence, never judged
    for garbage in (["not", "a", "snapshot"], {"equivalence": "garbage", "groups": [], "disparities": None}):
        with pytest.raises(InputError):
            evaluate_gate(garbage)
    with pytest.raises(InputError, match="equivalence must be an object"):
        evaluate_gate({**MINIMAL, "equivalence": "garbage"})


# ---------------------------------------------------------------------------- CLI
def test_gate_cli_exit_codes_and_write(tmp_path, snapshot, capsys):
    snapshot = _passing(snapshot)
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot))
    assert main(["gate", str(path), "--fail-on", "fail"]) == 0
    out = capsys.readouterr().out
    assert "gate: WARN" in out and "equivalence[speculative]" in out
    assert main(["gate", str(path)]) == 1  # by default the decision (Do not enable: slower than vanilla) exits 1
    out = capsys.readouterr().out
    assert "FAIL  decision" in out and "the decision is Do not enable" in out and "gate: FAIL" in out
    config = tmp_path / "audit.yaml"
    config.write_text(yaml.safe_dump({"gate": {"slowdown_severity": "fail", "min_speedup": 1000.0}}))
    assert main(["gate", str(tmp_path), "--config", str(config), "--write"]) == 1  # a run folder works too
    written = json.loads(path.read_text())
    assert written["gate"]["status"] == FAIL and written["gate"]["exit_code"] == 1
    assert written["gate"]["thresholds"]["min_speedup"] == 1000.0
    assert written["groups"] == snapshot["groups"]  # nothing else touched
    capsys.readouterr()
    config.write_text("gate:\n  alpha: 2\n")
    assert main(["gate", str(path), "--config", str(config)]) == 2
    assert main(["gate", str(tmp_path / "missing.json")]) == 2
    (tmp_path / "broken.json").write_text("{not json")
    assert main(["gate", str(tmp_path / "broken.json")]) == 2
    err = capsys.readouterr().err
    assert "gate.alpha" in err and "does not exist" in err and "not valid JSON" in err and "Traceback" not in err


def test_control_rejected_only_at_alpha_warns_and_a_gross_rejection_voids_the_audit(snapshot):
    """The control is judged at alpha x 0.02 (analysis.judge_control): a rejection at alpha alone is chance
    in 1 audit of 20 and warns; a gross one (or an impossible token) makes the audit invalid."""
    from specaudit.analysis.equivalence import CONTROL_ALPHA_FACTOR, control_warning, judge_battery, judge_control, judge_status
    from specaudit.contracts.snapshot import EngineEquivalence

    for holm_p, status, equivalence in ((0.03, WARN, EquivalenceStatus.NO_VIOLATION_FOUND), (1e-5, FAIL, EquivalenceStatus.VIOLATION)):
        section = json.loads(json.dumps(snapshot["equivalence"]))
        raw = section["engines"]["vanilla"]
        raw["goodness_of_fit"]["gate"][0].update(holm_pvalue=holm_p, reject=True)
        raw["goodness_of_fit"]["pvalue"] = holm_p
        raw["goodness_of_fit"]["verdict"] = raw["verdict"] = FAIL
        control_alpha = 0.05 * CONTROL_ALPHA_FACTOR
        assert control_alpha == pytest.approx(0.001)
        unjudged = EngineEquivalence.model_validate(raw)
        control = judge_control(unjudged, control_alpha)
        assert control.verdict == status and unjudged.verdict == FAIL  # a judged copy; the entry judged is as it was
        warning = control_warning(control, 0.05, control_alpha)
        assert (warning is not None) == (status == WARN)
        control = judge_status(control, 0.05, warning=warning)
        assert control.status == equivalence  # one status: a WARN control is not a VIOLATION
        battery = judge_battery(
            {**{name: EngineEquivalence.model_validate(e) for name, e in section["engines"].items()}, "vanilla": control}
        )
        assert battery.get("control_failed", False) == (status == FAIL)
        section["engines"]["vanilla"] = control.model_dump(exclude_unset=True)
        section.update(battery, **({"control_warning": warning} if warning else {}))
        check = _check(evaluate_gate({**snapshot, "equivalence": section}, GateThresholds(**LOOSE)), "control[vanilla]")
        assert check.status == status, check.message
        assert ("rerun with another --seed" in check.message) == (status == WARN)


# ---------------------------------------------------------------------------- screen and cost model
def test_screen_and_cost_model_checks_follow_their_intervals(snapshot):
    snapshot = json.loads(json.dumps(snapshot))
    assert not {"screen-agreement", "cost-model"} & {c.name for c in evaluate_gate(snapshot).checks}  # no screen: no checks
    snapshot["screen"] = {
        "engine_over_screen_acceptance": {"value": 1.01, "ci_low": 0.95, "ci_high": 1.07},
        "given_engine_paths": {"value": 1.004, "ci_low": 0.98, "ci_high": 1.03},
        "n_prompts": 40,
        "agrees": True,
    }
    snapshot["speed"] = {
        "source": "cost model",
        "validation": {"measured_over_predicted": {"value": 0.97, "ci_low": 0.9, "ci_high": 1.04}, "holds": True},
    }
    result = evaluate_gate(snapshot)
    assert _check(result, "screen-agreement").status == PASS and _check(result, "cost-model").status == PASS
    assert "1.00 [0.98, 1.03] given the engine's own paths" in _check(result, "screen-agreement").message
    snapshot["screen"].update(agrees=False, finding="the screen does not reproduce this engine")
    snapshot["speed"]["validation"]["holds"] = False
    snapshot["speed"]["finding"] = "the cost model misses something"
    result = evaluate_gate(snapshot)
    assert _check(result, "screen-agreement").status == WARN and "does not reproduce" in _check(result, "screen-agreement").message
    assert _check(result, "cost-model").status == WARN and "misses" in _check(result, "cost-model").message
    # the overall interval covers 1, but one group's timed prompts differ from the others'
    group = {"n_timed_prompts": 1, "measured_over_predicted": 0.7, "others": 1.0, "pvalue": 1e-4, "pvalue_holm": 4e-3}
    snapshot["speed"].update(
        validation_by_group={"language": {"ja": group}},
        validation_by_group_smallest_pvalue_holm=group["pvalue_holm"],
        finding="measured / predicted speed-up differs for 1 group(s)",
    )
    snapshot["speed"]["validation"]["holds"] = True
    assert _check(evaluate_gate(snapshot), "cost-model").status == WARN
    del snapshot["speed"]["finding"]
    check = _check(evaluate_gate(snapshot), "cost-model")
    assert check.status == PASS and "smallest Holm p = 0.004" in check.message
    # one timed prompt off its prediction: reported with the way to tell, not a finding
    snapshot["speed"]["single_prompt_outliers"] = "the one timed prompt of 1 group(s) is off its prediction: re-time"
    check = _check(evaluate_gate(snapshot), "cost-model")
    assert check.status == PASS and "re-time" in check.message
