"""Output invariants (issue 42, item 3): every record of every engine holds them on real engines'
records (tiny models in process; servers in tests/engines/test_endpoint.py), each mutant of a
record breaks exactly the invariant it should, named by position, and the gate's
`output-invariants` FAILs naming engine, record and position."""

from __future__ import annotations

import json

import pytest

from specaudit.analysis import analyze
from specaudit.analysis.invariants import output_invariants, output_limits
from specaudit.config import RunConfig
from specaudit.contracts.snapshot import snapshot_document
from specaudit.engines import run
from specaudit.execution.invariants import OutputLimits, record_violations, text_matches
from specaudit.execution.records import read_manifest, read_records
from specaudit.gate import evaluate_gate

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # 2-prompt groups: the prompt-set warning is expected


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, tiny_pair_dir, tiny_prompts_file):
    target, draft = tiny_pair_dir
    out = tmp_path_factory.mktemp("invariants") / "run"
    cfg = RunConfig(
        target=str(target),
        draft=str(draft),
        prompts=str(tiny_prompts_file),
        engines="vanilla,speculative,hf-assisted",
        samples=2,
        max_new_tokens=10,
        warmup=0,
        device="cpu",
    )
    run(cfg, out, progress=False)
    return out


@pytest.fixture(scope="module")
def limits(local_run, tiny_pair) -> OutputLimits:
    return output_limits(read_manifest(local_run), tiny_pair)


def test_real_local_engines_hold_every_invariant(local_run, limits):
    records = read_records(local_run / "records.jsonl")
    assert {r["engine"] for r in records} == {"vanilla", "speculative", "hf-assisted"}
    assert any(r["finish_reason"] == "eos" for r in records) and any(r["finish_reason"] == "length" for r in records)
    section = output_invariants(records, limits)
    assert section.status == "PASS" and section.violations == 0 and not section.skipped, section.message
    assert section.checked == ["length", "vocabulary", "after-eos", "after-stop", "stop-reason", "grammar", "text", "counters"]
    without_pair = output_limits(read_manifest(local_run), None)  # the tokenizer the run names, loaded by analysis
    assert without_pair.vocab_size == limits.vocab_size and without_pair.eos_ids <= limits.eos_ids
    assert output_invariants(records, without_pair).status == "PASS"


def _mutants(record: dict, eos: int) -> dict[str, tuple[dict, str, int | None]]:
    ids = record["output_token_ids"]
    return {
        "too long": ({**record, "output_token_ids": ids + [5] * 10}, "length", 10),
        "out of vocabulary": ({**record, "output_token_ids": [ids[0], 99_999, *ids[2:]]}, "vocabulary", 1),
        "negative id": ({**record, "output_token_ids": [-1, *ids[1:]]}, "vocabulary", 0),
        "token after eos": ({**record, "output_token_ids": [ids[0], eos, ids[0]]}, "after-eos", 2),
        "text not the ids": ({**record, "text": "Z" + record["text"][1:]}, "text", 0),
        "accepted > proposed": ({**record, "accepted": record["proposed"] + 1}, "counters", None),
        "per-step sum": ({**record, "accepted_per_step": [a + 1 for a in record["accepted_per_step"]]}, "counters", None),
    }


@pytest.mark.parametrize(
    "mutant", ["too long", "out of vocabulary", "negative id", "token after eos", "text not the ids", "accepted > proposed", "per-step sum"]
)
def test_each_mutant_breaks_its_invariant_at_its_position(local_run, limits, mutant):
    records = read_records(local_run / "records.jsonl")
    record = next(r for r in records if r["engine"] == "speculative" and r["finish_reason"] == "length" and r["accepted"] > 0)
    assert not record_violations(record, limits)
    changed, check, position = _mutants(record, min(limits.eos_ids))[mutant]
    found = record_violations(changed, limits)
    assert found and {v["check"] for v in found} >= {check}, found
    assert next(v for v in found if v["check"] == check)["position"] == position


def test_a_token_after_a_stop_string_is_found_and_the_completing_token_may_carry_more(limits):
    decode = limits.decode
    ids = [10, 11, 12, 13, 14, 15]
    text = decode(ids, True, False)
    stop = text[2:4]  # completed by the token at position 3
    record = {"key": "p|speculative|0", "engine": "vanilla", "sampling": {"stop": [stop]}, "output_token_ids": ids, "text": text}
    found = [v for v in record_violations(record, OutputLimits(decode=decode)) if v["check"] == "after-stop"]
    assert [v["position"] for v in found] == [4] and "2 token(s) follow the stop string" in found[0]["problem"]
    cut = {**record, "output_token_ids": ids[:4], "text": decode(ids[:4], True, False)}
    assert not record_violations(cut, OutputLimits(decode=decode))
    assert text_matches(text[:2], ids[:4], decode, [stop])  # a server that leaves the stop string out of its text


def test_a_record_ended_on_a_stop_must_hold_the_stop(limits):
    """OpenVINO GenAI drops a stop string ending in whitespace with its token and still reports STOP
    (docs/openvino.md, finding 10): the ids then end before the stop."""
    decode = limits.decode
    ids = [10, 11, 12, 13]
    stop = decode(ids, True, False)[-2:]  # completed by the last token
    record = {"key": "p|vanilla|0", "engine": "vanilla", "sampling": {"stop": [stop]}, "finish_reason": "stop", "output_token_ids": ids}
    assert not record_violations(record, OutputLimits(decode=decode))
    dropped = {**record, "output_token_ids": ids[:-1]}
    found = [v for v in record_violations(dropped, OutputLimits(decode=decode)) if v["check"] == "stop-reason"]
    assert len(found) == 1 and "finish_reason is stop but no stop string" in found[0]["problem"]
    assert not record_violations({**dropped, "finish_reason": "length"}, OutputLimits(decode=decode))


def _piece_decode(ids: list[int], skip_special: bool, clean_up: bool) -> str:
    """A SentencePiece-like decoder: id 1 is a special token, every other id a word with its leading space."""
    words = [("<s>" if i == 1 else f" w{i}") for i in ids if not (skip_special and i == 1)]
    return "".join(words).lstrip(" ") if words and ids[0] != 1 else "".join(words)


@pytest.mark.parametrize(
    "text, holds",
    [
        ("w2 w3", True),
        (" w2 w3", True),  # a server decoding with the prompt as context keeps the first piece's space
        ("w2 w3\ufffd", True),  # a character cut by the budget
        ("w2 w3<s>", False),
        ("w2 w4", False),
        ("w2", False),
    ],
)
def test_text_equals_the_ids_detokenised_up_to_legitimate_differences(text, holds):
    assert text_matches(text, [2, 3], _piece_decode) is holds
    assert text_matches("<s> w2", [1, 2], _piece_decode)  # special tokens written out, or not
    assert text_matches("w2", [1, 2], _piece_decode)


def test_the_gate_names_engine_record_and_position(tmp_path, local_run):
    out = tmp_path / "run"
    out.mkdir()
    for name in ("manifest.json",):
        (out / name).write_bytes((local_run / name).read_bytes())
    records = read_records(local_run / "records.jsonl")
    index, record = next((i, r) for i, r in enumerate(records) if r["engine"] == "speculative" and len(r["text"]) > 3)
    records[index] = {**record, "text": record["text"][:2] + "#" + record["text"][3:]}  # a mutant engine whose text is not its ids
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    snapshot = snapshot_document(analyze(out))
    check = next(c for c in evaluate_gate(snapshot).checks if c.name == "output-invariants")
    assert check.status == "FAIL" and f"speculative record {record['key']} position 2: the text" in check.message, check.message
    assert "is not the ids detokenised" in check.message
    assert snapshot["output_invariants"]["engines"]["speculative"]["records_violating"] == 1


def test_counters_that_contradict_the_output_are_a_finding_not_a_stop(tmp_path, local_run):
    """An engine whose step counts do not add up to its output: output-invariants FAILs naming it,
    and the statistics leave its per-step account out instead of refusing the run."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_bytes((local_run / "manifest.json").read_bytes())
    records = read_records(local_run / "records.jsonl")
    index, record = next((i, r) for i, r in enumerate(records) if r["engine"] == "speculative" and len(r["accepted_per_step"]) > 2)
    records[index] = {**record, "accepted_per_step": [0] * len(record["accepted_per_step"])}
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    snapshot = snapshot_document(analyze(out))
    section = snapshot["output_invariants"]
    assert section["status"] == "FAIL" and section["checks"]["counters"] >= 1 and section["first"]["record"] == record["key"]
    assert "accepted_per_step does not sum to accepted" in section["message"]


@pytest.mark.slow
def test_the_committed_default_pair_audit_holds_every_invariant_with_the_real_tokenizer():
    """reports/example: the screen, vanilla and speculative on SmolLM2-135M (528 records), checked
    with the tokenizer the run names (a real BPE tokenizer: spaces, special tokens, EOS)."""
    from pathlib import Path

    run = Path(__file__).resolve().parents[2] / "reports" / "example"
    limits = output_limits(read_manifest(run), None)
    assert limits.vocab_size == 49152 and limits.decode is not None and not limits.skipped
    section = output_invariants(read_records(run / "records.jsonl"), limits)
    assert section.status == "PASS" and section.records == 528 and set(section.engines) == {"screen", "vanilla", "speculative"}, (
        section.message
    )


def test_a_tree_step_lists_one_acceptance_per_depth_it_reached():
    """A tree step reached depths 1..min(a + 1, D) only (past a rejection there is a subtree, not
    one drafted token): its accept_prob has that many entries; a chain's has one per drafted token."""
    from specaudit.execution.invariants import counter_problems

    tree = {
        "tree": [2, 2, 1],
        "accepted": 3,
        "proposed": 6,
        "steps": 2,
        "output_token_ids": [1, 2, 3, 4, 5],
        "accepted_per_step": [0, 3],
        "proposed_per_step": [3, 3],
        "accept_prob": [[0.4], [0.9, 0.8, 0.7]],
    }
    assert counter_problems(tree) == []
    assert counter_problems({**tree, "accept_prob": [[0.4, 0.1, 0.1], [0.9, 0.8, 0.7]]}) == [
        "accept_prob does not have one entry per drafted token reached"
    ]
    chain = {key: value for key, value in tree.items() if key != "tree"}
    assert counter_problems(chain) == ["accept_prob does not have one entry per drafted token"]
