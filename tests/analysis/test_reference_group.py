"""The reference group is chosen on purpose: --reference DIM=GROUP (or the config's
`analysis: reference:`), else the prompt set's declared reference, else the best-served group
(highest acceptance), never the largest group with ties broken by name; the snapshot and the
report say which and why."""

from __future__ import annotations

import shutil

import pytest

from specaudit.analysis import analyze
from specaudit.cli import main
from specaudit.config import AnalysisSettings
from specaudit.contracts.snapshot import snapshot_document
from specaudit.errors import InputError
from specaudit.report.view import build_view
from tests.report_inputs import HOSTILE_GROUP


@pytest.fixture
def run_copy(audit_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(audit_run, out)
    return out


def test_default_is_the_best_served_group_and_says_so(run_copy):
    snapshot = snapshot_document(analyze(run_copy, n_boot=50, equivalence=False, write=False))
    part = snapshot["groups"]["style"]
    rates = {g: e["metrics"]["acceptance_rate"]["value"] for g, e in part["by_group"].items()}
    assert part["reference"] == max(rates, key=rates.get)  # the two groups hold 3 prompts each: size cannot decide
    assert part["reference_reason"].startswith("best-served")
    fairness = next(c for c in build_view(snapshot)["summary"]["cards"] if c.label == "Fairness")
    assert f"style: {part['reference']} (best-served" in " ".join(fairness.lines)


@pytest.mark.parametrize("group", ["plain", HOSTILE_GROUP])
def test_a_given_reference_is_used_and_recorded(run_copy, group):
    snapshot = snapshot_document(analyze(run_copy, n_boot=50, equivalence=False, write=False, reference={"style": group}))
    assert snapshot["groups"]["style"]["reference"] == group
    assert snapshot["groups"]["style"]["reference_reason"] == "given (--reference)"
    assert snapshot["run"]["analysis"]["reference"] == {"style": group}
    assert snapshot["disparities"]["style"]["reference"] == group


def test_bad_references_are_one_sentence(run_copy, capsys):
    with pytest.raises(InputError, match="does not compare"):
        analyze(run_copy, n_boot=50, equivalence=False, write=False, reference={"dialect": "sae"})
    with pytest.raises(InputError, match="not among the groups"):
        analyze(run_copy, n_boot=50, equivalence=False, write=False, reference={"style": "nope"})
    with pytest.raises(InputError, match="did you mean plain\\?$"):  # a typo gets a suggestion
        analyze(run_copy, n_boot=50, equivalence=False, write=False, reference={"style": "plian"})
    with pytest.raises(InputError, match="did you mean style\\?$"):
        analyze(run_copy, n_boot=50, equivalence=False, write=False, reference={"styel": "plain"})
    with pytest.raises(InputError, match="DIMENSION=GROUP"):
        AnalysisSettings.parse({"reference": ["style"]})
    assert main(["analyze", str(run_copy), "--no-equivalence", "--reference", "style"]) == 2
    assert "DIMENSION=GROUP" in capsys.readouterr().err
    assert main(["analyze", str(run_copy), "--no-equivalence", "--n-boot", "50", "--reference", "style=plain"]) == 0
