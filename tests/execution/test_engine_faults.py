"""Engine faults are findings (issue 42, item 4): an engine call that raises is a fault line in
faults.jsonl with the engine's own message, the run goes on, a run of faults in a row stops it with
one sentence, resume asks the faulted items again without redoing a record, and the gate FAILs
`engine-faults`. The faults here come from a real tiny model whose forward pass raises (a forward
hook, as a runtime's kernel would) and from an executor that lets the exception escape (as the
OpenVINO executor does); servers answering 500 are in tests/engines/test_endpoint.py.
"""

from __future__ import annotations

import json

import pytest

from specaudit.analysis import analyze
from specaudit.analysis.engine_faults import engine_faults
from specaudit.config import RunConfig
from specaudit.contracts.run import Fault
from specaudit.contracts.snapshot import snapshot_document
from specaudit.engines.local import LocalExecutor
from specaudit.execution.base import execute
from specaudit.execution.faults import FaultLimitReached, read_faults
from specaudit.execution.records import read_records
from specaudit.gate import evaluate_gate

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # 2-prompt groups: the prompt-set warning is expected

MESSAGE = "kernel launch failed: planted fault in the draft's forward pass"


class _FailingCalls:
    """A forward pre-hook that raises on the model calls whose number is in `failing` (1-based)."""

    def __init__(self, failing) -> None:
        self.failing, self.calls = failing, 0

    def __call__(self, module, args, kwargs=None):
        self.calls += 1
        if self.calls in self.failing:
            raise RuntimeError(MESSAGE)


def _cfg(tiny_pair_dir, tiny_prompts_file, **options) -> RunConfig:
    target, draft = tiny_pair_dir
    base = dict(target=str(target), draft=str(draft), prompts=str(tiny_prompts_file), max_new_tokens=6, warmup=0, device="cpu", seed=3)
    return RunConfig(**{**base, **options})


def _run(cfg, pair, out, hook=None):
    handle = pair.draft.register_forward_pre_hook(hook) if hook else None
    try:
        return execute(LocalExecutor(cfg, pair), out, progress=False)
    finally:
        if handle is not None:
            handle.remove()


def test_a_fault_is_recorded_the_run_goes_on_and_resume_asks_again(tmp_path, tiny_pair, tiny_pair_dir, tiny_prompts_file):
    cfg = _cfg(tiny_pair_dir, tiny_prompts_file, samples=2)
    out = tmp_path / "run"
    summary = _run(cfg, tiny_pair, out, _FailingCalls({1}))  # the first draft call: the first speculative item
    faults = read_faults(out)
    records = read_records(out / "records.jsonl")
    assert summary.faults == 1 and len(faults) == 1 and len(records) == 4 * 2 * 2 - 1
    fault = faults[0]
    assert (fault.engine, fault.error, fault.message) == ("speculative", "RuntimeError", MESSAGE)
    assert fault.key not in {r["key"] for r in records} and fault.records_before == 1  # after p1's vanilla record

    snapshot = snapshot_document(analyze(out))
    section = snapshot["engine_faults"]
    assert section["status"] == "FAIL" and (section["count"], section["items"], section["recovered"]) == (1, 1, 0)
    after = section["speculation_after"]["speculative"]
    assert after["records_after"] == after["drafted_after"] == 7 and not section["findings"]  # it still speculates
    assert snapshot["output_invariants"]["status"] == "PASS"  # the records that were written are whole
    check = next(c for c in evaluate_gate(snapshot).checks if c.name == "engine-faults")
    assert check.status == "FAIL" and "1 engine call(s) failed on 1 plan item(s) (speculative 1)" in check.message
    assert f"RuntimeError: {MESSAGE}" in check.message and "speculative drafted on 7 of 7 records after the first fault" in check.message

    summary = _run(cfg, tiny_pair, out)  # the engine is well again: only the faulted item is decoded
    assert (summary.written, summary.skipped, summary.faults) == (1, 15, 0)
    resumed = read_records(out / "records.jsonl")
    assert resumed[:15] == records and resumed[15]["key"] == fault.key
    assert len(read_faults(out)) == 1  # the fault stays on file: the engine did fail once
    section = snapshot_document(analyze(out))["engine_faults"]
    assert section["status"] == "FAIL" and section["recovered"] == 1 and "1 of those items answered when asked again" in section["message"]


def test_faults_in_a_row_stop_the_run_with_one_sentence_keeping_everything(tmp_path, tiny_pair, tiny_pair_dir, tiny_prompts_file):
    cfg = _cfg(tiny_pair_dir, tiny_prompts_file, engines="speculative", max_consecutive_faults=2)
    out = tmp_path / "run"
    with pytest.raises(FaultLimitReached) as raised:
        _run(cfg, tiny_pair, out, _FailingCalls(range(1, 10_000)))  # the draft fails for good
    sentence = str(raised.value)
    assert "\n" not in sentence and sentence.startswith("the speculative engine failed on 2 plan items in a row")
    assert MESSAGE in sentence and str(out / "faults.jsonl") in sentence and "resume" in sentence
    assert read_records(out / "records.jsonl") == [] and [f.key for f in read_faults(out)] == ["p1|speculative|0", "p2|speculative|0"]
    summary = _run(cfg, tiny_pair, out)  # the engine is back: the same command decodes every item
    assert (summary.written, summary.records) == (4, 4) and len(read_faults(out)) == 2


class _EscapingExecutor(LocalExecutor):
    """An executor that lets its engine's exception escape instead of using execution.faults.attempt,
    as the OpenVINO executor does: the run loop must record the fault and call it again."""

    failing = "p2|vanilla|0"

    def execute(self, folder, items, emit):
        for item in items:
            if item.key == self.failing:
                raise RuntimeError("Exception from src/inference/src/infer_request.cpp: planted")
            super().execute(folder, [item], emit)


def test_an_exception_escaping_the_executor_is_the_fault_of_the_item_it_did_not_answer(
    tmp_path, tiny_pair, tiny_pair_dir, tiny_prompts_file
):
    cfg = _cfg(tiny_pair_dir, tiny_prompts_file)
    out = tmp_path / "run"
    summary = execute(_EscapingExecutor(cfg, tiny_pair), out, progress=False)
    faults = read_faults(out)
    assert summary.faults == 1 and [f.key for f in faults] == ["p2|vanilla|0"] and "infer_request.cpp" in faults[0].message
    keys = [r["key"] for r in read_records(out / "records.jsonl")]
    assert len(keys) == 7 and "p2|vanilla|0" not in keys and "p2|speculative|0" in keys  # the items after it ran


def _records(proposed: list[int]) -> list[dict]:
    return [{"key": f"p{i}|speculative|0", "engine": "speculative", "proposed": n, "output_token_ids": [1]} for i, n in enumerate(proposed)]


def _fault(records_before: int) -> Fault:
    return Fault(
        "px|speculative|0", "px", "speculative", 0, 1, False, "RuntimeError", "boom", records_before, 1, "2026-01-01T00:00:00+00:00"
    )


@pytest.mark.parametrize(
    "proposed, fault_at, stopped",
    [
        ([4] * 6 + [0] * 6, 6, True),  # a mutant: drafting ends at the fault
        ([4] * 6 + [0] * 6, 2, True),  # ... some records after it
        ([4] * 12, 6, False),  # correct: it still drafts
        ([4] * 10 + [0] * 2, 6, False),  # two empty drafts are not a stop
        ([0] * 12, 6, False),  # never drafted, before the fault either: nothing stopped
        ([0] * 12, 0, True),  # the fault came first and nothing drafted after it (OpenVINO's sampled pipelines)
        ([0] * 3, 0, False),  # ... too few records after it to say
    ],
)
def test_speculation_stopped_after_a_fault_is_a_finding(proposed, fault_at, stopped):
    section = engine_faults(_records(proposed), [_fault(fault_at)])
    assert section.status == "FAIL" and bool(section.findings) == stopped
    if stopped and fault_at:
        assert "speculative stopped drafting after the first engine fault" in section.message
    elif stopped:
        assert "speculative drafted no token on any of its 12 records, all written after the first engine fault" in section.message


def test_a_torn_last_fault_line_is_dropped_and_a_bad_one_is_one_sentence(tmp_path):
    line = json.dumps(_fault(0).to_json())
    (tmp_path / "faults.jsonl").write_text(line + "\n" + line[:20])
    with pytest.warns(UserWarning, match="torn last line"):
        assert len(read_faults(tmp_path)) == 1
    (tmp_path / "faults.jsonl").write_text(json.dumps({**_fault(0).to_json(), "records_before": "0"}) + "\n")
    from specaudit.errors import InputError

    with pytest.raises(InputError, match="line 1: field 'records_before' must be an integer"):
        read_faults(tmp_path)


def test_merged_shards_keep_every_fault_placed_among_the_records(tmp_path, tiny_pair, tiny_pair_dir, tiny_prompts_file):
    from specaudit.execution.merge import merge_runs

    cfg = _cfg(tiny_pair_dir, tiny_prompts_file)
    shards = [tmp_path / "s0", tmp_path / "s1"]
    for index, out in enumerate(shards):
        handle = tiny_pair.draft.register_forward_pre_hook(_FailingCalls({1}))
        try:
            execute(LocalExecutor(cfg, tiny_pair), out, progress=False, shard=(index, 2))
        finally:
            handle.remove()
    per_shard = [read_faults(out) for out in shards]
    first_records = len(read_records(shards[0] / "records.jsonl"))
    merge_runs(tmp_path / "merged", shards)
    merged = read_faults(tmp_path / "merged")
    assert [f.key for f in merged] == [f.key for faults in per_shard for f in faults] and len(merged) == 2
    assert merged[1].records_before == per_shard[1][0].records_before + first_records


def test_an_audit_whose_engine_goes_down_still_reaches_the_gate(tmp_path, tiny_pair, tiny_pair_dir, tiny_prompts_file):
    """The run stops at the fault limit; the audit analyses what was answered and its gate FAILs engine-faults."""
    from specaudit.audit import audit

    cfg = _cfg(tiny_pair_dir, tiny_prompts_file, samples=2, max_consecutive_faults=1)
    handle = tiny_pair.draft.register_forward_pre_hook(_FailingCalls(range(1, 10_000)))
    try:
        with pytest.warns(UserWarning, match="the speculative engine failed on 1 plan items in a row"):
            result = audit(cfg, tmp_path / "audit", pair=tiny_pair, progress=False)
    finally:
        handle.remove()
    assert result.exit_code == 1 and len(read_records(tmp_path / "audit" / "records.jsonl")) == 1
    failed = [c.name for c in result.snapshot.gate.checks if c.status == "FAIL"]
    assert "engine-faults" in failed and (tmp_path / "audit" / "report.html").is_file()
