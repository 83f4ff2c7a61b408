"""Issue 16: one sentence and exit 2 for bad input, exit 70 for our own bugs, never a green gate
on garbage, and a user's buggy verify function reported as a bug of that sampler, not a crash."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch
import yaml

from specaudit.cli import EXIT_INTERNAL_ERROR, main
from specaudit.contracts.snapshot import SNAPSHOT_SCHEMA_VERSION, load_snapshot
from specaudit.errors import InputError

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "reports" / "example"


@pytest.fixture(scope="module")
def snapshot() -> dict:
    return json.loads((EXAMPLE / "snapshot.json").read_text())


def _only_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("specaudit: warning:")]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


# ---------------------------------------------------------------------------- snapshot contract
def _case_folded(value, key=None):
    """Statuses and verdicts (and the gate's counts by status) in lower case, everything else as it is."""
    if isinstance(value, dict):
        return {(k.lower() if key == "counts" else k): _case_folded(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_case_folded(v, key) for v in value]
    return value.lower() if key in ("status", "verdict") and isinstance(value, str) else value


def test_todays_snapshot_loads_and_an_old_spelling_reads_the_same():
    """The example loads whole and unchanged; a copy with the lower-case statuses snapshots had
    before the contracts' own spelling loads to the same values."""
    loaded = load_snapshot(EXAMPLE)
    raw = json.loads((EXAMPLE / "snapshot.json").read_text())
    assert loaded["schema_version"] == SNAPSHOT_SCHEMA_VERSION
    assert json.loads(json.dumps(loaded)) == raw
    old = {**raw, "gate": {**raw["gate"], "status": raw["gate"]["status"].lower()}}
    assert load_snapshot(old)["gate"]["status"] == raw["gate"]["status"]
    assert _case_folded(json.loads(json.dumps(load_snapshot(old)))) == _case_folded(raw)


GARBAGE = {
    "schema_version only": (lambda s: {"schema_version": 1}, "has no 'run' section"),
    "equivalence oops": (lambda s: {**s, "equivalence": "oops"}, ": equivalence must be an object, got a string"),
    "groups [1, 2]": (lambda s: {**s, "groups": [1, 2]}, ": groups must be an object, got a list"),
    "no groups": (lambda s: {k: v for k, v in s.items() if k != "groups"}, "has no 'groups' section"),
    "schema_version 99": (lambda s: {**s, "schema_version": 99}, "has schema_version 99 but this specaudit reads version 1"),
    "schema_version one": (lambda s: {**s, "schema_version": "one"}, "has schema_version 'one'"),
    "no schema_version": (lambda s: {k: v for k, v in s.items() if k != "schema_version"}, "no schema_version field"),
    "metric as text": (
        lambda s: {**s, "groups": {"d": {"by_group": {"a": {"metrics": {"speedup": {"value": "1.2"}}}}}}},
        ": groups.d.by_group.a.metrics.speedup.value must be a number or null, got a string",
    ),
}


@pytest.mark.parametrize("case", sorted(GARBAGE))
@pytest.mark.parametrize("command", ["gate", "report", "monitor"])
def test_every_reader_refuses_a_snapshot_that_breaks_the_contract(tmp_path, snapshot, capsys, case, command):
    damage, message = GARBAGE[case]
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(damage(snapshot)))
    argv = {
        "gate": ["gate", str(path)],
        "report": ["report", str(path), "--out", str(tmp_path / "r")],
        "monitor": ["monitor", "check", "--snapshot", str(path), "--store", f"sqlite:///{tmp_path / 'h.db'}"],
    }[command]
    assert main(argv) == 2
    line = _only_error_line(capsys.readouterr().err)
    assert message in line and str(path) in line
    assert not (tmp_path / "r").exists()  # nothing rendered from garbage


# ------------------------------------------------------------------------------------ exit codes
def test_an_internal_error_is_exit_70_with_one_line(monkeypatch, capsys):
    import specaudit.gate

    def broken(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(specaudit.gate, "evaluate_gate", broken)
    monkeypatch.delenv("SPECAUDIT_DEBUG", raising=False)
    assert main(["gate", str(EXAMPLE)]) == EXIT_INTERNAL_ERROR
    line = _only_error_line(capsys.readouterr().err)
    assert line.startswith("specaudit: internal error: `specaudit gate` failed with RuntimeError: boom second line")
    assert "SPECAUDIT_DEBUG=1" in line

    monkeypatch.setenv("SPECAUDIT_DEBUG", "1")
    assert main(["gate", str(EXAMPLE)]) == EXIT_INTERNAL_ERROR
    assert "Traceback" in capsys.readouterr().err


# ------------------------------------------------------------------------------ output paths
def test_report_writes_all_files_or_none(tmp_path, capsys):
    shutil.copy(EXAMPLE / "snapshot.json", tmp_path)
    (tmp_path / "summary.md").mkdir()
    assert main(["report", str(tmp_path)]) == 2
    assert "summary.md: a folder of that name is in the way" in _only_error_line(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snapshot.json", "summary.md"]  # no report.html, no .tmp


def test_analyze_refuses_an_unwritable_run_folder_before_any_work(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(EXAMPLE / "manifest.json", run)
    (run / "records.jsonl").write_text("".join((EXAMPLE / "records.jsonl").read_text().splitlines(keepends=True)[:8]))
    (run / "snapshot.json").mkdir()  # what stands where the snapshot goes (root ignores permission bits)
    assert main(["analyze", str(run), "--no-equivalence"]) == 2
    assert "snapshot.json: a folder of that name is in the way" in _only_error_line(capsys.readouterr().err)


# ----------------------------------------------------------------------------- refused input
def test_gate_config_with_unknown_top_level_keys(tmp_path, capsys):
    config = tmp_path / "gate.yaml"
    config.write_text("gat:\n  alpha: 0.5\nk: 4\n")  # a typo of `gate:` beside a run option
    assert main(["gate", str(EXAMPLE), "--config", str(config)]) == 2
    assert "unknown top-level key(s) gat" in _only_error_line(capsys.readouterr().err)


def test_analyze_fallback_threshold_outside_0_1(capsys):
    assert main(["analyze", str(EXAMPLE), "--fallback-threshold", "5", "--no-equivalence"]) == 2
    assert "--fallback-threshold is an acceptance rate, so it lies in [0, 1]; got 5.0" in _only_error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--seeds", "0"], "--seeds must be an integer >= 1, got 0"),
        (["--e2e-seeds", "0"], "--e2e-seeds must be an integer >= 1, got 0"),
        (["--samplers", ""], "--samplers names no sampler"),
        (["--samplers", " , "], "--samplers names no sampler"),
        (["--server-seeds", "0"], "--server-seeds must be an integer >= 1, got 0"),
        (["--servers", " , "], "--servers names no server"),
        (["--servers", "correct,bogus"], "unknown server mutant(s) bogus"),
    ],
)
def test_selftest_refuses_empty_budgets(capsys, flags, message):
    assert main(["selftest", "--skip-e2e", *flags]) == 2
    assert message in _only_error_line(capsys.readouterr().err)


def test_prompt_over_the_byte_limit_is_an_error_before_tokenizing(tmp_path, capsys):
    from specaudit.prompts import MAX_PROMPT_BYTES

    path = tmp_path / "big.jsonl"
    rows = [
        {"id": "huge", "text": "x" * (MAX_PROMPT_BYTES + 1), "attributes": {"group": "a"}},
        {"id": "small", "text": "hello", "attributes": {"group": "a"}},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["prompts", "validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"line 1, field 'text': prompt 'huge' is {MAX_PROMPT_BYTES + 1:,} bytes, over the limit" in err and "1 error(s)" in err


@pytest.mark.parametrize("text", ["null", '{"text": "a", "id": "a"}\nnull'])
def test_prompt_files_holding_null_are_refused_not_a_crash(tmp_path, capsys, text):
    for suffix in (".jsonl", ".json"):  # pyarrow's JSON reader dies with SIGSEGV on these
        path = tmp_path / f"p{suffix}"
        path.write_text(text + "\n")
        assert main(["prompts", "validate", str(path)]) == 2
        captured = capsys.readouterr()
        assert "a JSON NoneType, not" in captured.out + captured.err


def test_history_list_says_how_many_runs_it_leaves_out(tmp_path, snapshot, capsys):
    from specaudit import monitor

    store_url = f"sqlite:///{tmp_path / 'h.db'}"
    with monitor.open_store(store_url, create=True) as store:
        for i in range(3):
            store.add({**snapshot, "run": {**snapshot["run"], "id": f"run-{i}", "created": f"2026-01-0{i + 1}T00:00:00"}})
    assert main(["history", "list", "--store", store_url, "--limit", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2 of 3 shown (--limit 0 for all)"
    assert main(["history", "list", "--store", store_url, "--limit", "0"]) == 0
    assert "shown" not in capsys.readouterr().out
    assert main(["history", "list", "--store", store_url, "--limit", "-1"]) == 2


# ------------------------------------------------------------------------------- models offline
def test_unknown_model_offline_fails_at_once_naming_it(monkeypatch):
    from huggingface_hub import constants

    from specaudit.models._hub import hub_options

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    started = time.perf_counter()
    with pytest.raises(InputError, match=r"cannot load model 'no-such-org/no-such-model'.*HF_HUB_OFFLINE is set"):
        hub_options("no-such-org/no-such-model")
    # No network and no HF_HUB_OFFLINE: a refused connection decides it, not a minute of retries.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(InputError, match=r"no connection to 127\.0\.0\.1"):
        hub_options("no-such-org/no-such-model")
    assert time.perf_counter() - started < 30  # generous: the point is seconds, not the 54 s of retries


# ------------------------------------------------------------------- runs on the tiny pair
def _run_argv(tiny_pair_dir, prompts, out, *extra):
    target, draft = tiny_pair_dir
    return [
        "run",
        "--target",
        str(target),
        "--draft",
        str(draft),
        "--prompts",
        str(prompts),
        "--out",
        str(out),
        "--max-new-tokens",
        "8",
        "--quiet",
        *extra,
    ]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--verify", "os:sep"], "--verify 'os:sep' names a str, not a function"),
        (["--plant-disparity", "group=zzz:0.5"], "no prompt is in group 'zzz' of 'group' (its groups: a, b)"),
        (["--plant-disparity", "language=fr:0.5"], "no prompt has the dimension 'language' (the prompts have group)"),
    ],
)
def test_run_refuses_settings_that_cannot_apply(tmp_path, tiny_pair_dir, tiny_prompts_file, capsys, extra, message):
    assert main(_run_argv(tiny_pair_dir, tiny_prompts_file, tmp_path / "o", *extra)) == 2
    assert message in _only_error_line(capsys.readouterr().err)
    assert not (tmp_path / "o" / "records.jsonl").exists()


def test_run_config_with_an_unknown_analysis_key(tmp_path, tiny_pair_dir, tiny_prompts_file, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"analysis": {"alpah": 0.01}}))
    assert main(_run_argv(tiny_pair_dir, tiny_prompts_file, tmp_path / "o", "--config", str(config))) == 2
    assert "run.yaml, `analysis:` section: unknown analysis option(s) alpah" in _only_error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    "section, message",
    [
        ({"alpha": "0.01"}, "`analysis:` section: alpha must be a number in (0, 1), got '0.01'"),  # strict: a string is no number
        ({"n_boot": 10.5}, "`analysis:` section: n_boot must be an integer >= 1, got 10.5"),
        ({"band": [1.1, 2]}, "`analysis:` section: band must be two numbers low,high around 1"),
        ({"seed": True}, "`analysis:` section: seed must be an integer in [0, 2**63 - 1], got True"),
    ],
)
def test_run_config_with_a_bad_analysis_value_names_the_key(tmp_path, tiny_pair_dir, tiny_prompts_file, capsys, section, message):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"analysis": section}))
    assert main(_run_argv(tiny_pair_dir, tiny_prompts_file, tmp_path / "o", "--config", str(config))) == 2
    assert f"run.yaml, {message}" in _only_error_line(capsys.readouterr().err)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--equivalence-alpha", "1.5"], "--equivalence-alpha must be a number in (0, 1), got 1.5 (the family-wise error rate, e.g. 0.05)"),
        (["--n-boot", "0"], "--n-boot must be an integer >= 1, got 0"),
        (["--band", "0.9"], "--band must be two numbers low,high around 1 (0 < low <= 1 <= high) such as 0.8,1.25; got '0.9'"),
    ],
)
def test_analyze_flags_are_named_as_written(tmp_path, capsys, flags, message):
    assert main(["analyze", str(tmp_path), "--no-equivalence", *flags]) == 2  # refused before the folder is read
    assert message in _only_error_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


def test_a_prompt_longer_than_the_context_is_refused_naming_it(tmp_path, tiny_pair_dir, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "long-one", "text": "word " * 2000, "attributes": {"group": "a"}}) + "\n")
    assert main(_run_argv(tiny_pair_dir, prompts, tmp_path / "o")) == 2
    line = _only_error_line(capsys.readouterr().err)
    assert "prompt 'long-one' is" in line and "exceeds the model's context of 512 tokens" in line


def test_analyze_a_vanilla_only_run(tmp_path, tiny_pair_dir, tiny_prompts_file, capsys):
    out = tmp_path / "o"
    assert main(_run_argv(tiny_pair_dir, tiny_prompts_file, out, "--engines", "vanilla")) == 0
    assert main(["analyze", str(out), "--n-boot", "50"]) == 0
    snapshot = load_snapshot(out)
    assert snapshot["equivalence"]["status"] == "not run" and snapshot["equivalence"]["message"] == "no speculative engine in the run"


# --------------------------------------------------------------------- users' verify functions
def _reference(d, q, p, g):
    from specaudit.decoding import reference_verify

    return reference_verify(d, q, p, g)


def _empty(d, q, p, g):
    return torch.empty(0, dtype=torch.long)


def _too_many(d, q, p, g):
    return torch.zeros(d.shape[0] + 2, dtype=torch.long)


def _outside(d, q, p, g):
    emitted = _reference(d, q, p, g)
    emitted[-1] = p.shape[-1] + 3
    return emitted


def _floats(d, q, p, g):
    return _reference(d, q, p, g).float()


def _two_d(d, q, p, g):
    return _reference(d, q, p, g)[None]


def _raises(d, q, p, g):
    raise RuntimeError("sampler exploded")


def _wrong_prefix(d, q, p, g):
    emitted = _reference(d, q, p, g)
    if emitted.shape[0] > 1:
        emitted[0] = (emitted[0] + 1) % p.shape[-1]
    return emitted


def _generate(tiny_pair, verify, seed=0):
    from specaudit.decoding import SamplingSpec, speculative_generate

    return speculative_generate(
        tiny_pair.target,
        tiny_pair.draft,
        [1, 5, 9, 14],
        spec=SamplingSpec(1.0),
        k=4,
        max_new_tokens=24,
        generator=torch.Generator().manual_seed(seed),
        eos_ids=set(),
        vocab_size=tiny_pair.vocab_size,
        verify=verify,
    )


@pytest.mark.parametrize(
    "verify, problem",
    [
        (_empty, "returned 0 token ids; a step with 4 drafted tokens emits 1 to 5"),
        (_too_many, "returned 6 token ids"),
        (_outside, "outside the vocabulary"),
        (_floats, "returned float32 values, not integer token ids"),
        (_two_d, "not 1-D"),
        (_raises, "raised RuntimeError: sampler exploded"),
    ],
)
def test_a_broken_verify_ends_the_generation_with_the_violation_recorded(tiny_pair, verify, problem):
    result = _generate(tiny_pair, verify)
    assert result.finish_reason == "verify_error"
    assert len(result.verify_violations) == 1 and result.verify_violations[0]["call"] == 1
    assert problem in result.verify_violations[0]["problem"]
    assert len(result.tokens) == result.accepted + result.steps  # what was emitted before stays consistent


def test_a_wrong_accepted_prefix_is_recorded_and_decoding_goes_on(tiny_pair):
    result = _generate(tiny_pair, _wrong_prefix)
    assert result.finish_reason == "length" and len(result.tokens) == 24
    assert result.verify_violations and all(
        "the accepted prefix must be the drafted tokens" in v["problem"] for v in result.verify_violations
    )
    assert not _generate(tiny_pair, _reference).verify_violations


def test_analyze_and_gate_fail_a_sampler_that_broke_its_contract(tmp_path, tiny_pair_dir, tiny_prompts_file, monkeypatch, capsys):
    module = tmp_path / "my_sampler.py"
    module.write_text("import torch\n\ndef verify(d, q, p, g):\n    return torch.full((1,), p.shape[-1] + 1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "o"
    assert main(_run_argv(tiny_pair_dir, tiny_prompts_file, out, "--verify", "my_sampler:verify")) == 0
    assert main(["analyze", str(out), "--n-boot", "50"]) == 0
    capsys.readouterr()
    entry = load_snapshot(out)["equivalence"]["engines"]["speculative"]
    assert entry["verdict"] == "FAIL" and entry["verify_violations"]["count"] == 4  # one per prompt: each stops at call 1
    assert "call 1 of record" in entry["message"] and "outside the vocabulary" in entry["message"]
    assert main(["gate", str(out)]) == 1
    assert "broke its contract in 4 call(s); first: call 1 of record" in capsys.readouterr().out
