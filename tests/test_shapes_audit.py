"""`specaudit audit` with the screen, the tree and staged engines end to end on the tiny pair:
equivalence for each, and the shapes section (tokens per step, acceptance per depth and level,
speed-up per group, with intervals; the screen's expectation for the tree) in the snapshot, the
report and summary.md."""

import json

import pytest
import yaml

from specaudit.cli import main
from specaudit.contracts import CheckStatus
from specaudit.contracts.snapshot import read_snapshot
from specaudit.execution.records import read_records


@pytest.mark.slow
def test_tree_and_staged_audit_end_to_end(tmp_path, tiny_pair_dir, tiny_prompts_file):
    target, draft = tiny_pair_dir
    config = tmp_path / "audit.yaml"
    options = {
        "target": str(target),
        "draft": str(draft),
        "prompts": str(tiny_prompts_file),
        "engines": "screen,vanilla,speculative,tree,staged",
        "tree": "2,2,1",
        "levels": "ngram,int8",
        "level_k": "2,3",
        "samples": 2,
        "max_new_tokens": 12,
        "device": "cpu",
        "analysis": {"n_boot": 100},
        "gate": {"min_group_size": 1},
    }
    config.write_text(yaml.safe_dump(options))
    out = tmp_path / "audit"
    code = main(["audit", "--config", str(config), "--out", str(out), "--quiet"])
    assert code in (0, 1)
    snapshot = read_snapshot(out)
    engines = snapshot.equivalence.engines
    for name in ("vanilla", "speculative", "tree", "staged"):
        assert engines[name].verdict == CheckStatus.PASS, (name, engines[name].status, engines[name].status_reason)

    # a tree record's per-step lists cover the depths its steps reached: they keep the invariants
    assert snapshot.output_invariants.status == CheckStatus.PASS, snapshot.output_invariants.first
    shapes = snapshot.shapes
    assert shapes is not None and set(shapes.engines) == {"speculative", "tree", "staged", "screen"}
    assert shapes.engines["tree"].shape == "tree 2,2,1, sampled children"
    assert shapes.engines["staged"].shape == "ngram:2 -> int8:3 -> target"
    records = [r for r in read_records(out / "records.jsonl") if not r.get("timing_only")]
    for name, depth in (("tree", 3), ("staged", 3), ("speculative", 4)):
        overall = shapes.engines[name].overall
        mine = [r for r in records if r["engine"] == name]
        # tokens per step is what the records say, and its interval holds it
        expected = sum(len(r["output_token_ids"]) for r in mine) / sum(len(r["accepted_per_step"]) for r in mine)
        assert overall.tokens_per_step.value == pytest.approx(expected)
        assert overall.tokens_per_step.ci_low <= expected <= overall.tokens_per_step.ci_high
        assert 1 <= len(overall.depths) <= depth
        assert all(0.0 <= d.value <= 1.0 for d in overall.depths)
        assert overall.speedup is not None and overall.speedup.value > 0
        # the step's measured cost turns tokens per step into the predicted speed-up (timings on
        # tiny models can leave the cost unmeasurable: then there is no prediction)
        engine = shapes.engines[name]
        if engine.verify_cost is None:
            assert overall.predicted_speedup is None
        else:
            assert engine.verify_cost > 0 and engine.cost_ratio >= 0 and 0 < engine.offered_per_step <= depth
            cost = engine.cost_ratio * engine.offered_per_step + engine.verify_cost
            assert overall.predicted_speedup.value == pytest.approx(overall.tokens_per_step.value / cost)
        groups = shapes.engines[name].groups["group"]
        assert set(groups) == {"a", "b"} and sum(g.n_prompts for g in groups.values()) == overall.n_prompts
    # the screen's expectation for the tree: its expected sums along each screened path
    screened = [r for r in records if r["engine"] == "screen"]
    expected = shapes.engines["screen"].overall
    assert shapes.engines["screen"].shape.startswith("tree 2,2,1, sampled children: the screen's expectation")
    tokens, steps = (sum(r["tree_expected"]["tokens_per_step"][i] for r in screened) for i in (0, 1))
    assert expected.tokens_per_step.value == pytest.approx(tokens / steps) and 1.0 <= tokens / steps <= 4.0
    assert len(expected.depths) == 3 and all(0.0 <= d.value <= 1.0 for d in expected.depths)
    assert expected.speedup is None  # the screen times nothing
    assert (expected.predicted_speedup is None) == (shapes.engines["tree"].verify_cost is None)  # at the tree's measured cost
    assert shapes.engines["tree"].nodes_per_step <= 10 and shapes.engines["staged"].nodes_per_step is None  # 2 + 4 + 4 nodes
    levels = shapes.engines["staged"].overall.levels
    assert set(levels) == {"small_to_medium", "medium_to_target"}
    totals = [lvl for r in records if r["engine"] == "staged" for lvl in r["levels"]]
    kept = sum(lvl["accepted"] for lvl in totals if lvl["level"] == "medium -> target")
    offered = sum(lvl["proposed"] for lvl in totals if lvl["level"] == "medium -> target")
    assert levels["medium_to_target"].value == pytest.approx(kept / offered)

    summary = (out / "summary.md").read_text()
    assert "## Shapes" in summary and "tree 2,2,1, sampled children" in summary and "medium → target" in summary
    assert 'id="shapes"' in (out / "report.html").read_text()
    assert json.loads((out / "snapshot.json").read_text())["shapes"]["engines"]["tree"]["overall"]["depths"]
