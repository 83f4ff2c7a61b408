"""A speculative server that stopped drafting during the run, told from prompt lookup that finds
nothing to draft on most prompts (llama-server's ngram-simple on short outputs)."""

from __future__ import annotations

from specaudit.analysis.acceptance_stability import acceptance_stability
from specaudit.contracts.run import SPECULATIVE_ENGINE


def _records(drafts) -> list[dict]:
    """6 prompts x 2 samples at levels 1 then 4, in that order; drafts(prompt, level, index) -> proposed."""
    records, index = [], 0
    for level in (1, 4):
        for prompt in range(6):
            for _ in range(2):
                proposed = drafts(prompt, level, index)
                records.append(
                    {
                        "prompt_id": f"p{prompt}",
                        "engine": SPECULATIVE_ENGINE,
                        "concurrency": level,
                        "started_at": float(index),
                        "proposed": proposed,
                        "accepted": proposed // 2,
                        "output_token_ids": [1] * 8,
                    }
                )
                index += 1
    return records


def test_prompt_lookup_drafting_on_the_first_prompts_only_is_no_stop():
    # the two prompts whose n-grams recur draft on one sample each, early; the rest never do
    lookup = acceptance_stability(_records(lambda p, level, i: 3 if level == 1 and p < 2 and i % 2 == 0 else 0), n_boot=50, seed=0)
    assert not [f for f in lookup.findings if f.kind == "stopped_during_run"]


def test_a_server_that_stops_drafting_the_prompts_it_drafted_before_is_a_stop():
    stopped = acceptance_stability(_records(lambda p, level, i: 4 if i < 6 else 0), n_boot=50, seed=0)
    (finding,) = [f for f in stopped.findings if f.kind == "stopped_during_run"]
    assert finding.request == 7 and finding.p_value < 0.01 and "depends on the prompt only" in stopped.message
