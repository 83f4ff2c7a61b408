"""`--engines llama-speculative`: llama.cpp's `speculative` example (its tree drafting), built
beside llama-server (`specaudit llama-server build`), one process per record.

The fast checks (settings, the command line, cutting a parsed log to the budget, the log parser
on a log the real binary wrote, kept in tests/engines/data/) need no binary. The integration tests
run the real binary on the embedded SmolLM2 GGUF and skip, saying why, where it is not built.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specaudit.config import RunConfig
from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.contracts.snapshot import snapshot_document
from specaudit.decoding import SamplingSpec
from specaudit.engines import llama_build as build_module
from specaudit.engines.llama_speculative.command import command, sampling_flags
from specaudit.engines.llama_speculative.generation import generation_of
from specaudit.engines.llama_speculative.log import LogError, SpeculativeLog, Step, generated_output, parse
from specaudit.engines.llama_speculative.process import Finished
from specaudit.engines.llama_speculative.settings import speculative_settings
from specaudit.errors import InputError
from specaudit.prompts._model import Prompt

DATA = Path(__file__).parent / "data"


# ----------------------------------------------------------------------------- settings and command
def test_settings_defaults_and_refusals():
    settings = speculative_settings({})
    assert (settings.n_parallel, settings.p_split) == (1, 0.1)
    assert speculative_settings({"llama_speculative": {"n-parallel": 3, "p_split": 0.2}}).n_parallel == 3
    with pytest.raises(InputError, match="llama_speculative.n_parallel"):
        speculative_settings({"llama_speculative": {"n_parallel": 0}})
    with pytest.raises(InputError, match="unknown setting"):
        speculative_settings({"llama_speculative": {"branches": 3}})


def test_llama_speculative_defaults_to_the_identity_draft():
    assert RunConfig(engines="llama-speculative").draft == "target"
    assert RunConfig(engines="llama-speculative", draft="/m/d.gguf").draft == "/m/d.gguf"


def test_command_sets_the_whole_chain_and_the_tree():
    flags = sampling_flags(SamplingSpec(temperature=1.0, top_k=0, top_p=1.0))
    pairs = dict(zip(flags[::2], flags[1::2]))
    assert pairs["--samplers"] == "top_k;top_p;temperature"
    assert (pairs["--temp"], pairs["--top-k"], pairs["--top-p"], pairs["--min-p"]) == ("1", "0", "1", "0")
    assert pairs["--repeat-penalty"] == "1" and pairs["--dry-multiplier"] == "0" and pairs["--xtc-probability"] == "0"
    assert dict(zip(*[iter(sampling_flags(SamplingSpec(temperature=0.0)))] * 2))["--temp"] == "0"
    argv = command(
        Path("/b/llama-speculative"),
        Path("/m/t.gguf"),
        Path("/m/t.gguf"),
        "hi",
        spec=SamplingSpec(),
        max_new_tokens=12,
        seed=7,
        k=4,
        settings=speculative_settings({"llama_speculative": {"n_parallel": 3, "p_split": 0.1}}),
        threads=1,
        ctx=512,
    )
    pairs = {flag: argv[i + 1] for i, flag in enumerate(argv[:-1]) if flag.startswith("-")}
    assert pairs["-m"] == pairs["-md"] == "/m/t.gguf" and pairs["-p"] == "hi" and pairs["-n"] == "12" and pairs["--seed"] == "7"
    assert (pairs["--spec-draft-n-max"], pairs["-np"], pairs["--draft-p-split"], pairs["-lv"]) == ("4", "3", "0.1", "5")


def test_bad_input_is_one_sentence(tmp_path):
    from specaudit.engines import run

    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_text("not a model")
    with pytest.raises(InputError, match="is not a GGUF file"):
        run(RunConfig(engines="llama-speculative", target=str(not_gguf), max_new_tokens=4), tmp_path / "out", progress=False)


def test_missing_binary_says_how_to_build(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECAUDIT_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECAUDIT_LLAMA_SPECULATIVE", raising=False)
    with pytest.raises(InputError, match="llama-speculative is not built .*specaudit llama-server build"):
        build_module.require_binary(build_module.SPECULATIVE)


# ----------------------------------------------------------------------------- a parsed log cut to the budget
def _log(*steps: tuple[dict, list[int], int]) -> SpeculativeLog:
    parsed = [Step(branches=b, accepted=a, final=f) for b, a, f in steps]
    return SpeculativeLog(parsed, {"n_predict": sum(len(s.tokens) for s in parsed), "n_accept": sum(len(s.accepted) for s in parsed)})


FINISHED = Finished(b"", "", 1.0, 0.1, 0.5)


def test_generation_counts_steps_depth_and_width():
    log = _log(({}, [], 5), ({0: [6, 7, 8], 1: [6, 9]}, [6, 7], 10), ({0: [11, 12]}, [11, 12], 13))
    g = generation_of(log, FINISHED, {2}, 64)
    assert g.tokens == [5, 6, 7, 10, 11, 12, 13] and g.finish_reason == "eos"  # stopped early: the program's own end
    assert (g.proposed_per_step, g.accepted_per_step, g.steps) == ([0, 3, 2], [0, 2, 2], 3)
    assert g.extra["tree_branches_per_step"] == [0, 2, 1] and g.extra["tree_nodes_per_step"] == [0, 4, 2]


def test_generation_cuts_the_overshoot_and_after_eos():
    log = _log(({}, [], 5), ({0: [6, 7, 8]}, [6, 7, 8], 9), ({0: [1, 1]}, [1], 4))
    g = generation_of(log, FINISHED, {2}, 3)  # the budget ends inside step 2's kept drafts
    assert g.tokens == [5, 6, 7] and g.finish_reason == "length" and g.accepted_per_step == [0, 2]
    assert g.extra["emitted_past_cut"] == 4
    eos = _log(({}, [], 5), ({0: [2, 7]}, [2, 7], 9))
    g = generation_of(eos, FINISHED, {2}, 8)  # the program keeps drafts past an end-of-generation id
    assert g.tokens == [5, 2] and g.finish_reason == "eos" and g.accepted_per_step == [0, 1]


def test_stdout_must_start_with_the_prompt():
    assert generated_output(b"\n\nPROMPT tokens\n\n\n\n", b"PROMPT") == b" tokens"
    with pytest.raises(LogError, match="does not start with the prompt"):
        generated_output(b"\n\nOTHER", b"PROMPT")


def test_parser_reads_a_branch_whose_piece_holds_a_bracket_and_newlines():
    """tests/engines/data/llama_speculative_qwen_bracket.log (the real run in its .cmd, the Qwen
    pair): a draft branch holds token 2533 "]\\n\\n", whose piece closes a line with "]"; the first
    parser ended the branch there and faulted the record ("kept token 2533 ... which drafted [18]")."""
    log = parse((DATA / "llama_speculative_qwen_bracket.log").read_text(encoding="utf-8"))
    assert (log.totals["n_predict"], log.totals["n_accept"]) == (len(log.tokens), sum(len(s.accepted) for s in log.steps)) == (27, 17)
    assert any(2533 in branch for step in log.steps for branch in step.branches.values())


def test_a_crash_or_a_hang_is_an_engine_fault_with_the_log_tail():
    """-np > 1 aborts in the vendored example (docs/trees.md): a non-zero exit is an EngineError
    (a fault for that record, the run goes on), naming the status and the log's last lines."""
    from specaudit.engines.llama_speculative.process import run as run_process
    from specaudit.errors import EngineError

    with pytest.raises(EngineError, match=r"exited with status 3: .*GGML_ASSERT"):
        run_process(["sh", "-c", "echo 'GGML_ASSERT(logits != nullptr) failed' >&2; exit 3"], 10)
    with pytest.raises(EngineError, match="ran past 0.5 s"):
        run_process(["sleep", "5"], 0.5)
    done = run_process(["sh", "-c", "echo 'I decoded   16 tokens in    1.302 seconds, speed: 1 t/s' >&2"], 10)
    assert done.decode_s == 1.302 and done.encode_s is None


# ----------------------------------------------------------------------------- the real binary
def _binary_or_skip() -> Path:
    binary = build_module.find_binary(build_module.SPECULATIVE)
    if binary is None:
        pytest.skip(
            f"llama-speculative is not built for llama-cpp-python {build_module.binding_version()}: run `specaudit llama-server build`"
        )
    return binary


@pytest.mark.parametrize("name", ["t1", "greedy"])
def test_parser_reads_a_log_the_binary_wrote(name):
    """tests/engines/data/llama_speculative_{t1,greedy}.log: the stderr of a real run, from its first
    verification line on (the command in the .cmd beside it): the identity draft, -np 1, k 4, 12 tokens."""
    stderr = (DATA / f"llama_speculative_{name}.log").read_text(encoding="utf-8")
    log = parse(stderr)
    assert len(log.tokens) == log.totals["n_predict"] == 16  # -n 12: the program checks its budget between steps only
    assert sum(len(s.accepted) for s in log.steps) == log.totals["n_accept"] == 12
    assert log.steps[0].branches == {} and log.steps[0].accepted == []  # the first token comes from the prompt pass
    assert [s.depth for s in log.steps] == [0, 4, 4, 4] and all(s.final is not None for s in log.steps)
    assert log.tokens[:5] == [788, 41234, 506, 294, 7016]  # "In twilight's hallow": at t = 1 too, the greedy path
    # a kept token its branch did not draft, or totals that disagree, are an inconsistent log: never a silent record
    bad = stderr.replace("(41234, ' twilight')", "(41235, ' twilight')", 1)
    with pytest.raises(LogError, match="which drafted"):
        parse(bad)
    with pytest.raises(LogError, match="n_predict"):
        parse(stderr.replace("n_predict = ", "n_predict = 1", 1))
    with pytest.raises(LogError, match="did not finish"):
        parse(stderr[: stderr.index("n_predict")])


@pytest.fixture(scope="module")
def identity_run(tmp_path_factory):
    """A real --engines llama-speculative run: the embedded GGUF as target and draft (the identity
    draft), temperature 1, k 4, -np 1, two prompts × 12 tokens."""
    _binary_or_skip()
    pytest.importorskip("llama_cpp", reason="the control and the scoring run llama-cpp-python, which is not installed")
    from specaudit.engines import run
    from specaudit.prompts._model import PromptSet, rows_checksum

    rows = [
        Prompt(id="poem", text="Write a short poem about rain.", attributes={"group": "a"}),
        Prompt(id="sky", text="Explain why the sky is blue.", attributes={"group": "b"}),
    ]
    prompts = PromptSet(
        name="llama-speculative-test", version=1, checksum=rows_checksum(rows), source="memory", dimensions={}, prompts=rows
    )
    out = tmp_path_factory.mktemp("llama-speculative") / "run"
    run(RunConfig(engines="llama-speculative", temperature=1.0, max_new_tokens=12, k=4, warmup=0), out, prompt_set=prompts, progress=False)
    return out


@pytest.mark.slow
def test_engine_records_are_valid_and_their_ids_are_the_text(identity_run):
    from specaudit.execution.records import read_manifest, read_records
    from specaudit.models import load_tokenizer

    records = read_records(identity_run / "records.jsonl")
    assert sorted((r["prompt_id"], r["engine"]) for r in records) == sorted(
        (p, e) for p in ("poem", "sky") for e in (CONTROL_ENGINE, SPECULATIVE_ENGINE)
    )
    tokenizer = load_tokenizer("default")
    for record in records:
        assert 0 < len(record["output_token_ids"]) <= 12 and record["backend"] == "llama-speculative"
        assert record["text"] == tokenizer.decode(record["output_token_ids"], skip_special_tokens=True)
    for record in (r for r in records if r["engine"] == SPECULATIVE_ENGINE):
        per_step = record["proposed_per_step"]
        assert per_step[0] == 0 and all(d <= 4 for d in per_step)  # the first token is the prompt pass's
        assert len(record["tree_branches_per_step"]) == len(per_step) == record["steps"]
        assert record["acceptance_source"] == "debug log"
    manifest = read_manifest(identity_run)
    assert manifest["models"]["draft"]["identity"] is True
    assert (
        "-lv" in manifest["llama-speculative"]["command"] and manifest["llama-speculative"]["build"]["binaries"][-1] == "llama-speculative"
    )


@pytest.mark.slow
def test_the_audit_flags_the_identity_draft_at_temperature_1(identity_run):
    """The example drafts the draft's argmax and verifies it as a sample: with the identity draft
    every draft token (the target's argmax) is kept, and the white-box battery rejects the output
    even on 2 prompts × 12 tokens (PIT and surprisal), while the control passes."""
    from specaudit.analysis import analyze

    snapshot = snapshot_document(analyze(identity_run, n_boot=100))
    engines = snapshot["equivalence"]["engines"]
    assert snapshot["output_invariants"]["violations"] == 0
    assert engines[SPECULATIVE_ENGINE]["status"] == "violation"
    assert any(row["reject"] for row in engines[SPECULATIVE_ENGINE]["goodness_of_fit"]["gate"])
    assert engines[CONTROL_ENGINE]["status"] == "no violation found"
