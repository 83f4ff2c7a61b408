"""The real default pair: SmolLM2-135M-Instruct (embedded GGUF) with its int8 self-draft, on CPU. Greedy engines against vanilla.

One test a file: each runs minutes, and the test workers take a file at a time."""

import pytest

from specaudit.config import RunConfig
from specaudit.engines import run
from specaudit.execution.invariants import check_invariants
from specaudit.execution.records import read_records
from specaudit.prompts import load_prompts
from specaudit.stats.equivalence import greedy_exactness

pytestmark = pytest.mark.integration


def test_greedy_engines_match_vanilla_or_diverge_only_at_near_ties(tmp_path, default_pair):
    prompts = load_prompts("core", dimensions=["register"], per_group=6, seed=0)  # 12 prompts, 6 parallel pairs
    cfg = RunConfig(engines=("vanilla", "speculative", "hf-assisted"), temperature=0.0, max_new_tokens=24, warmup=0)
    run(cfg, tmp_path, pair=default_pair, prompt_set=prompts, progress=False)
    records = read_records(tmp_path / "records.jsonl")
    assert len(records) == 36 and not check_invariants(records)
    for engine in ("speculative", "hf-assisted"):
        result = greedy_exactness(records, default_pair.target, engine=engine, reference="vanilla")
        print(engine, result.to_dict())
        assert result.verdict == "PASS", result.to_dict()  # every divergence is a near-tie of the top-2 logits
        assert result.match_rate >= 0.8
