"""Per-depth and per-level acceptance of tree and staged records, by hand-made records."""

from __future__ import annotations

import math

from specaudit.stats.shape_acceptance import shape_acceptance


def test_depths_and_levels_per_group():
    records = [
        # a tree of depth 3: steps accepting 3, 0 and 1 (the last one offered depth 2 near the budget)
        {
            "engine": "tree",
            "attributes": {"lang": "en"},
            "accepted_per_step": [3, 0, 1],
            "proposed_per_step": [3, 3, 2],
            "output_token_ids": list(range(7)),
        },
        {
            "engine": "staged",
            "attributes": {"lang": "zh"},
            "accepted_per_step": [2],
            "proposed_per_step": [4],
            "output_token_ids": [1, 2, 3],
            "levels": [
                {"level": "small -> medium", "proposed": 8, "accepted": 2},
                {"level": "medium -> target", "proposed": 4, "accepted": 2},
            ],
        },
        {"engine": "vanilla", "attributes": {"lang": "en"}, "output_token_ids": [1]},
        {"engine": "tree", "attributes": {"lang": "en"}, "timing_only": True, "accepted_per_step": [9], "proposed_per_step": [9]},
    ]
    table = shape_acceptance(records, "lang").set_index("engine")
    tree = table.loc["tree"]
    assert tree["steps"] == 3 and math.isclose(tree["tokens_per_step"], 7 / 3)
    assert math.isclose(tree["depth_1"], 2 / 3)  # depth 1 reached in all 3 steps, accepted in 2
    assert math.isclose(tree["depth_2"], 1 / 2)  # reached in the steps accepting 3 and 1
    assert math.isclose(tree["depth_3"], 1.0)  # reached only in the step accepting 3 (the last offered depth 2)
    staged = table.loc["staged"]
    assert math.isclose(staged["small_to_medium"], 0.25) and math.isclose(staged["medium_to_target"], 0.5)
    assert math.isclose(staged["depth_3"], 0.0)


def test_intervals_resample_prompts():
    """With n_boot, each figure gets a prompt-bootstrap interval: prompts that agree give a
    zero-width one, prompts that differ one that spans them."""

    def record(prompt: str, group: str, accepted: list[int]) -> dict:
        return {
            "engine": "tree",
            "prompt_id": prompt,
            "attributes": {"lang": group},
            "accepted_per_step": accepted,
            "proposed_per_step": [2] * len(accepted),
            "output_token_ids": [0] * (sum(accepted) + len(accepted)),
        }

    records = [record("p1", "en", [2, 0]), record("p2", "en", [2, 0]), record("p3", "zh", [2, 2]), record("p4", "zh", [0, 0])]
    table = shape_acceptance(records, "lang", n_boot=200, seed=1).set_index("lang")
    en, zh = table.loc["en"], table.loc["zh"]
    assert en["n_prompts"] == 2 and en["depth_1"] == 0.5 and en["depth_1_ci_low"] == en["depth_1_ci_high"] == 0.5
    assert zh["depth_1"] == 0.5 and zh["depth_1_ci_low"] == 0.0 and zh["depth_1_ci_high"] == 1.0
    assert zh["tokens_per_step_ci_low"] == 1.0 and zh["tokens_per_step_ci_high"] == 3.0
