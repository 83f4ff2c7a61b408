"""Mutants inside the real speculative engine, judged by the full analysis, on tiny models."""

from specaudit.prompts import load_prompts
from specaudit.selftest import end_to_end_selftest


def test_gross_mutants_are_rejected_end_to_end_and_the_correct_sampler_is_not(tiny_pair):
    prompts = load_prompts("core", dimensions=["domain"], per_group=1, seed=0)
    table = end_to_end_selftest(tiny_pair, prompts, samplers=["always_accept", "target_not_warped", "deterministic_accept", "resample_from_p"],
                                seeds=range(2), samples=4, max_new_tokens=24).set_index("sampler")
    # The correct sampler's false-alarm rate is measured elsewhere (tests/stats, 200+ seeds); here
    # two audits at alpha = 0.001 must not reject it (a chance failure once in 500 runs).
    correct = end_to_end_selftest(tiny_pair, prompts, samplers=["correct"], seeds=range(2), samples=4, max_new_tokens=24, alpha=0.001)
    assert correct["rejection_rate"].item() == 0.0
    for mutant in ("always_accept", "target_not_warped", "deterministic_accept", "resample_from_p"):
        assert table.loc[mutant, "rejection_rate"] == 1.0, table.loc[mutant].to_dict()
    assert "step_pit" in table.loc["resample_from_p", "caught_by"]
    assert (table["tokens_per_audit"] > 200).all()
