"""Mutants inside the real speculative engine, judged by the full analysis, on tiny models."""

import pytest

from specaudit.errors import InputError
from specaudit.prompts import load_prompts
from specaudit.selftest import end_to_end_audit, end_to_end_selftest, subsampled_detection

pytestmark = pytest.mark.slow

GROSS = ("always_accept", "target_not_warped", "deterministic_accept", "resample_from_p")


@pytest.fixture(scope="module")
def prompts():
    return load_prompts("core", dimensions=["domain"], per_group=1, seed=0)


def test_gross_mutants_are_rejected_end_to_end_and_the_correct_sampler_is_not(tiny_pair, prompts):
    table = end_to_end_selftest(
        tiny_pair, prompts, samplers=list(GROSS), seeds=range(2), samples=4, max_new_tokens=24, subsamples=50
    ).set_index("sampler")
    # The correct sampler's false-alarm rate is measured elsewhere (tests/stats, 200+ seeds); here
    # two audits at alpha = 0.001 must not reject it (a chance failure once in 500 runs). Audits
    # re-drawn from their pool reject with mean probability 0.001 too, so a rate above 0.25 has
    # probability below 0.4% (Markov).
    correct = end_to_end_selftest(
        tiny_pair, prompts, samplers=["correct"], seeds=range(2), samples=4, max_new_tokens=24, alpha=0.001, subsamples=50
    )
    assert correct["rejection_rate"].item() == 0.0
    assert correct["subsampled_rate"].item() <= 0.25
    for mutant in GROSS:
        assert table.loc[mutant, "rejection_rate"] == 1.0, table.loc[mutant].to_dict()
        assert table.loc[mutant, "subsampled_rate"] == 1.0, table.loc[mutant].to_dict()
    assert "step_pit" in table.loc["resample_from_p", "caught_by"]
    assert (table["tokens_per_audit"] > 200).all()


def test_subsampling_needs_one_audit_of_pooled_runs_with_one_setting(tiny_pair, prompts, tmp_path):
    audit = end_to_end_audit(tiny_pair, prompts, "resample_from_p", seed=0, samples=2, max_new_tokens=16, keep=tmp_path / "run")
    assert (tmp_path / "run" / "records.jsonl").exists()
    # One audit's worth of sequences: every re-drawn audit is that audit, so the verdict carries over.
    table = subsampled_detection([tmp_path / "run"], tiny_pair, samples=[1, 2], subsamples=5).set_index("samples")
    assert table.loc[2, "rate"] == float(audit["rejected"]) == 1.0
    assert table.loc[2, "tokens_per_audit"] == audit["tokens"]
    assert table.loc[1, "tokens_per_audit"] < audit["tokens"]
    assert list(table["pool_audits"]) == [2, 1]
    with pytest.raises(InputError, match="holds 2 sequences of some prompt, fewer than the 3 per prompt"):
        subsampled_detection([tmp_path / "run"], tiny_pair, samples=3)
    end_to_end_audit(tiny_pair, prompts, "resample_from_p", seed=1, samples=2, max_new_tokens=8, keep=tmp_path / "shorter")
    with pytest.raises(InputError, match="cannot pool .*shorter with .*run: their max_new_tokens differ"):
        subsampled_detection([tmp_path / "run", tmp_path / "shorter"], tiny_pair, samples=2)


def test_selftest_exit_code_covers_the_end_to_end_part(monkeypatch, capsys):
    """A missed end-to-end row fails `specaudit selftest` even when the unit audit passes."""
    import pandas as pd

    from specaudit.cli import main
    from specaudit.selftest import end_to_end as e2e_module
    from specaudit.selftest.end_to_end import _verdict

    assert _verdict("correct", 0.0, 0.84, 0.05)["ok"] and not _verdict("correct", 0.3, 1.0, 0.05)["ok"]
    assert _verdict("always_accept", 0.16, 1.0, 0.05)["ok"] and not _verdict("bf16_draft_logits", 0.0, 0.7, 0.05)["ok"]
    table = pd.DataFrame([{"sampler": "always_accept", **_verdict("always_accept", 0.0, 0.84, 0.05)}])
    monkeypatch.setattr(e2e_module, "end_to_end_selftest", lambda *a, **k: table)
    code = main(["selftest", "--samplers", "always_accept", "--seeds", "2", "--e2e-seeds", "1", "--skip-servers"])
    assert code == 1 and "end-to-end always_accept missed the target" in capsys.readouterr().err
