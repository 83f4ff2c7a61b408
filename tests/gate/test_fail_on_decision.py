"""--fail-on: the gate's exit code agrees with the report's decision (by default on Do not enable;
`decision` also on Insufficient evidence; `fail` on failing checks only, where the gate says how to
make them agree). On the committed example (Do not enable: speculation is slower than vanilla,
every other check PASS or WARN)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from specaudit.cli import main
from specaudit.contracts.snapshot import load_snapshot
from specaudit.gate import GateThresholds, evaluate_gate
from specaudit.gate.decision import DecisionFacts, decision_key
from specaudit.report.view import build_view

EXAMPLE = Path(__file__).resolve().parents[2] / "reports" / "example"


@pytest.fixture(scope="module")
def example():
    return load_snapshot(json.loads((EXAMPLE / "snapshot.json").read_text()))


def _faster(snapshot):
    """The example with every speed-up above 1 (the decision is then Enable with conditions)."""
    faster = copy.deepcopy(dict(snapshot))
    for part in faster["groups"].values():
        for block in [part["overall"], *part["by_group"].values()]:
            speedup = block["metrics"].get("speedup")
            if speedup:
                speedup.update(value=1.5, ci_low=1.4, ci_high=1.6)
    return faster


def test_default_gate_exits_1_on_do_not_enable_and_fail_only_says_how_to_agree(example):
    result = evaluate_gate(example)
    assert result.decision == "do_not" and result.exit_code == 1 and result.disagreement is None
    assert [c.name for c in result.checks if c.status == "FAIL"] == ["decision"]
    assert "the decision is Do not enable; --fail-on do-not-enable exits 1 on it" in result.format()
    lax = evaluate_gate(example, GateThresholds(fail_on="fail"))
    assert lax.decision == "do_not" and lax.exit_code == 0 and "decision" not in [c.name for c in lax.checks]
    assert "--fail-on do-not-enable" in lax.format() and "--fail-on do-not-enable" in lax.to_dict()["disagreement"]
    view = build_view({**example, "gate": lax.to_dict()})
    assert view["summary"]["decision"]["title"] == "Do not enable"
    assert "--fail-on do-not-enable" in view["summary"]["decision"]["gate_note"]
    view = build_view({**example, "gate": result.to_dict()})
    assert view["summary"]["decision"]["gate"] == "Gate: FAIL (exit 1)" and view["summary"]["decision"]["gate_note"] is None
    # the failing decision check restates the banner: What to do does not list it as a problem of its own
    assert "Gate check decision" not in " ".join(item["text"] for item in view["summary"]["actions"])


def test_fail_on_decision_exits_1_exactly_when_the_decision_blocks(example):
    strict = GateThresholds(fail_on="decision")
    blocked = evaluate_gate(example, strict)
    assert blocked.exit_code == 1 and [c.name for c in blocked.checks if c.status == "FAIL"] == ["decision"]
    assert blocked.disagreement is None
    faster = load_snapshot(_faster(example))
    allowed = evaluate_gate(faster, strict)
    assert allowed.decision == "conditions" and allowed.exit_code == 0
    # the report states the same decision the gate judged, and the decision check is not evidence of its own
    view = build_view({**faster, "gate": allowed.to_dict()})
    assert view["summary"]["decision"]["title"] == "Enable with conditions"
    view = build_view({**example, "gate": blocked.to_dict()})
    assert view["summary"]["decision"]["title"] == "Do not enable" and "Gate check decision" not in " ".join(
        view["summary"]["decision"]["reasons"]
    )


def test_decision_rule_order():
    base = dict(judged=True, failing=False, violation=False, tested=True, slower_overall=False, compared=True, decided=True, gate_pass=True)
    assert decision_key(DecisionFacts(**base)) == "enable"
    assert decision_key(DecisionFacts(**{**base, "gate_pass": False})) == "conditions"
    assert decision_key(DecisionFacts(**{**base, "decided": False})) == "insufficient"
    assert decision_key(DecisionFacts(**{**base, "slower_overall": True, "decided": False})) == "do_not"
    assert decision_key(DecisionFacts(**{**base, "tested": False, "slower_overall": True})) == "insufficient"
    assert decision_key(DecisionFacts(**{**base, "failing": True, "tested": False})) == "do_not"
    assert decision_key(DecisionFacts(**{**base, "judged": False, "failing": True})) == "insufficient"


def test_cli_flag_and_config_key(tmp_path, capsys):
    assert main(["gate", str(EXAMPLE)]) == 1
    assert main(["gate", str(EXAMPLE), "--fail-on", "decision"]) == 1
    assert main(["gate", str(EXAMPLE), "--fail-on", "fail"]) == 0
    config = tmp_path / "gate.yaml"
    config.write_text("gate:\n  fail_on: fail\n")
    assert main(["gate", str(EXAMPLE), "--config", str(config)]) == 0
    assert main(["gate", str(EXAMPLE), "--config", str(config), "--fail-on", "do-not-enable"]) == 1  # the flag wins
    config.write_text("gate:\n  fail_on: never\n")
    assert main(["gate", str(EXAMPLE), "--config", str(config)]) == 2
    assert "fail_on" in capsys.readouterr().err
