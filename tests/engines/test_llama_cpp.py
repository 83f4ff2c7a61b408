"""`--engines llama-cpp`: llama.cpp (llama-cpp-python) in process, and its OpenAI server through
`--engines endpoint`, on the embedded SmolLM2 GGUF file (Q4_1; llama.cpp loads it in about a
second and decodes ~50 tokens/s on one thread).

The checks that need no llama.cpp (settings, bad input, acceptance bookkeeping) always run; the
others skip, saying so, only where llama-cpp-python is not installed (.ci/run installs it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from specaudit.cli import main
from specaudit.config import RunConfig
from specaudit.contracts.snapshot import snapshot_document
from specaudit.decoding import SamplingSpec
from specaudit.engines import llama_cpp_runtime as backend
from specaudit.engines import llama_cpp_settings
from specaudit.errors import InputError
from specaudit.execution.records import read_records

HAVE_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
needs_llama_cpp = pytest.mark.skipif(not HAVE_LLAMA_CPP, reason="llama-cpp-python is not installed (pip install specaudit[llama-cpp])")
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]  # 2-prompt groups: the prompt-set warning is expected


def _write_gguf(path: Path, tokens: list[str]) -> Path:
    """A GGUF file holding only a vocabulary (enough for the checks made before llama.cpp loads)."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_token_list(tokens)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# ----------------------------------------------------------------------------- settings (no llama.cpp needed)
def test_sampler_chain_is_explicit_with_every_other_stage_neutral():
    chain = backend.sampler_settings(SamplingSpec(1.0, top_k=50, top_p=0.9))
    assert (chain["temp"], chain["top_k"], chain["top_p"]) == (1.0, 50, 0.9)
    assert {k: chain[k] for k in ("min_p", "typical_p", "repeat_penalty", "frequency_penalty", "presence_penalty", "mirostat_mode")} == {
        "min_p": 0.0,
        "typical_p": 1.0,
        "repeat_penalty": 1.0,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
        "mirostat_mode": 0,
    }
    assert backend.sampler_settings(SamplingSpec(0.7, top_k=20))["temp"] == 0.7  # top-k commutes with temperature
    greedy = backend.sampler_settings(SamplingSpec(0.0))
    assert greedy["temp"] == 0.0 and greedy["top_k"] == 0  # temp 0 is llama.cpp's greedy sampler
    with pytest.raises(InputError, match="llama.cpp applies top-p before temperature"):
        backend.sampler_settings(SamplingSpec(0.7, top_p=0.9))


def test_seed_fits_llama_cpp_and_never_means_random():
    assert backend.llama_seed(0xFFFFFFFF) == 0 and backend.llama_seed((7 << 32) | 5) == 5
    assert all(0 <= backend.llama_seed(s) < 0xFFFFFFFF for s in (0, 1, (1 << 63) - 1, 0xFFFFFFFE))


def test_acceptance_per_step_compares_proposals_with_what_was_kept():
    prompt_length, output = 5, [10, 11, 12, 13, 14, 15]
    # The prompt pass emits 10. A call at n = 6 (output position 1) proposing 11, 12, 99 keeps two and the
    # step emits 13 of its own; an empty proposal at position 4 is a plain step (14); the call at position 5
    # has one budget position left: 1 offered, 1 kept, and the generation ends on that accepted draft.
    calls = [(6, [11, 12, 99]), (9, []), (10, [15, 16, 17]), (12, [1])]
    proposed, accepted = backend.acceptance_per_step(calls, prompt_length, output, max_new_tokens=6)
    assert proposed == [0, 3, 0, 1] and accepted == [0, 2, 0, 1]  # the prompt pass is a step without a draft
    assert len(proposed) + sum(accepted) == len(output) + 1  # steps + accepted = emitted, + 1 when it ends on a draft
    from specaudit.execution.invariants import check_invariants

    record = {"key": "p|speculative|0", "output_token_ids": output, "finish_reason": "length", "steps": len(proposed)}
    record |= {"proposed": sum(proposed), "accepted": sum(accepted), "proposed_per_step": proposed, "accepted_per_step": accepted}
    assert check_invariants([record]) == []  # the records' invariant allows that cut correction token
    assert check_invariants([{**record, "output_token_ids": output[:-1]}])  # and no more


def test_extra_settings_are_checked_when_the_run_config_is_built(tiny_prompts_file):
    """extra.llama_cpp is checked by its settings module, which the llama-cpp entry names and the
    llama-speculative entry reads (its control), before any run starts; kept as given."""
    base = dict(prompts=str(tiny_prompts_file), threads=1)
    with pytest.raises(InputError, match=r"extra.llama_cpp.n_ctx must be an integer >= 1"):
        RunConfig(engines="llama-cpp", draft="ngram", extra={"llama_cpp": {"n_ctx": 0}}, **base)
    with pytest.raises(InputError, match="extra.llama_cpp: unknown setting"):
        RunConfig(engines="llama-cpp", draft="ngram", extra={"llama_cpp": {"threads": 2}}, **base)
    with pytest.raises(
        InputError, match=r"--max-new-tokens 128 does not fit llama.cpp's context of 64 tokens; raise extra.llama_cpp.n_ctx"
    ):
        RunConfig(engines="llama-speculative", max_new_tokens=128, extra={"llama_cpp": {"n-ctx": 64}}, **base)
    cfg = RunConfig(engines="llama-cpp", draft="ngram", extra={"llama_cpp": {"n-ctx": 512, "n_threads": 2}}, **base)
    assert cfg.extra["llama_cpp"] == {"n-ctx": 512, "n_threads": 2}
    assert llama_cpp_settings.context_is_explicit(cfg)  # however spelled: the context is not sized over it
    assert llama_cpp_settings.backend_settings(cfg) == {"n_ctx": 512, "n_threads": 2, "n_batch": 512, "draft_threads": 1}
    assert not llama_cpp_settings.context_is_explicit(RunConfig(engines="llama-cpp", draft="ngram", **base))
    # a run folder's decoding identity never held the section: folders written before it resume
    assert cfg.decoding_identity() == RunConfig(engines="llama-cpp", draft="ngram", **base).decoding_identity()


def test_bad_input_is_one_sentence_exit_2(tmp_path, tiny_prompts_file, capsys):
    not_gguf = tmp_path / "weights.gguf"
    not_gguf.write_text("not a model")
    base = ["run", "--engines", "llama-cpp", "--prompts", str(tiny_prompts_file), "--quiet", "--max-new-tokens", "4"]
    cases = [
        (["--target", str(not_gguf), "--draft", "ngram"], "is not a GGUF file"),
        (["--target", str(tmp_path / "missing.gguf"), "--draft", "ngram"], "no such file"),
        (
            ["--draft", "int8"],
            "the draft is ngram (llama.cpp prompt lookup), a GGUF file sharing the target's vocabulary, a named model",
        ),
        (["--draft", "ngram", "--temperature", "0.7", "--top-p", "0.9"], "llama.cpp applies top-p before temperature"),
    ]
    for i, (options, message) in enumerate(cases):
        assert main([*base, "--out", str(tmp_path / f"out{i}"), *options]) == 2, options
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
        assert not (tmp_path / f"out{i}" / "records.jsonl").exists()


def test_a_draft_gguf_with_another_vocabulary_is_refused(tmp_path, tiny_prompts_file, capsys):
    target = _write_gguf(tmp_path / "target.gguf", ["<unk>", "a", "b", "c"])
    same = _write_gguf(tmp_path / "same.gguf", ["<unk>", "a", "b", "c"])
    other = _write_gguf(tmp_path / "other.gguf", ["<unk>", "a", "x", "c"])
    backend.check_draft_vocabulary(target, same)
    with pytest.raises(InputError, match=r"has another vocabulary than target .* 1 differing"):
        backend.check_draft_vocabulary(target, other)
    argv = [
        "run",
        "--engines",
        "llama-cpp",
        "--target",
        str(target),
        "--draft",
        str(other),
        "--prompts",
        str(tiny_prompts_file),
        "--out",
        str(tmp_path / "out"),
        "--quiet",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "another vocabulary" in err and "Traceback" not in err


def test_endpoint_prompt_as_is_checked():
    base = {"vanilla_url": "http://127.0.0.1:1/v1", "speculative_url": "http://127.0.0.1:2/v1"}

    def prompt_as(section: dict) -> str:
        return RunConfig(engines="endpoint", extra={"endpoint": section}).engine_settings("endpoint")["prompt_as"]

    assert prompt_as(base) == "token_ids"
    assert prompt_as({**base, "prompt_as": "text"}) == "text"
    with pytest.raises(InputError, match="endpoint.prompt_as must be one of 'token_ids' or 'text'"):
        prompt_as({**base, "prompt_as": "ids"})


# ----------------------------------------------------------------------------- in process (llama.cpp needed)
def _config(tiny_prompts_file, **options) -> RunConfig:
    base = dict(engines="llama-cpp", draft="ngram", prompts=str(tiny_prompts_file), samples=2, max_new_tokens=16, seed=3, warmup=1, k=4)
    return RunConfig(**{**base, **options})


@needs_llama_cpp
def test_records_seeds_and_acceptance_bookkeeping(tmp_path, tiny_prompts_file):
    from specaudit.engines import run
    from specaudit.execution.plan import derive_seed

    out = tmp_path / "run"
    summary = run(_config(tiny_prompts_file), out, progress=False)
    records = read_records(out / "records.jsonl")
    assert summary.written == len(records) == 4 * 2 * 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["backend"] == "llama-cpp" and manifest["llama_cpp"]["sampler_chain"]["min_p"] == 0.0
    assert manifest["models"]["target"]["gguf_sha256"]
    for record in records:
        assert record["backend"] == "llama-cpp"
        assert record["seed"] == derive_seed(3, record["prompt_id"], record["sample"])
        assert record["llama_seed"] == backend.llama_seed(record["seed"])
        n = len(record["output_token_ids"])
        assert 1 <= n <= 16 and record["finish_reason"] in ("eos", "length")
        if record["engine"] == "speculative":
            assert n <= record["steps"] + record["accepted"] <= n + 1  # + 1: the budget or EOS ended it on an accepted draft
            assert record["accepted"] == sum(record["accepted_per_step"]) <= record["proposed"] == sum(record["proposed_per_step"])
        else:
            assert record["steps"] == n and record["proposed"] == 0
        assert "position_beta" not in record  # prompt lookup has no draft distribution to compare
    assert run(_config(tiny_prompts_file), out, progress=False).written == 0  # resumes


@needs_llama_cpp
def test_same_seed_same_tokens_and_greedy_first_token_is_the_scorers_argmax(tmp_path, tiny_prompts_file):
    from specaudit.engines import run

    a, b = tmp_path / "a", tmp_path / "b"
    run(_config(tiny_prompts_file, samples=1), a, progress=False)
    run(_config(tiny_prompts_file, samples=1, warmup=0), b, progress=False)
    tokens = lambda folder: {r["key"]: r["output_token_ids"] for r in read_records(folder / "records.jsonl")}
    assert tokens(a) == tokens(b)  # llama.cpp's sampler is reproducible from the record's seed, whatever ran before

    greedy = tmp_path / "greedy"
    run(_config(tiny_prompts_file, samples=1, temperature=0.0), greedy, progress=False)
    manifest = json.loads((greedy / "manifest.json").read_text())
    scorer = backend.scoring_pair(manifest).target
    for record in read_records(greedy / "records.jsonl"):
        if record["engine"] == "vanilla":  # the prompt pass is the same batch in both: the first token is its argmax exactly
            logits = scorer.sequence_logits(record["prompt_token_ids"])
            assert int(np.argmax(logits[-1])) == record["output_token_ids"][0]


@needs_llama_cpp
def test_a_gguf_draft_that_is_the_target_is_accepted_under_greedy(tmp_path, tiny_prompts_file):
    from specaudit.engines import run
    from specaudit.models._loading import embedded_gguf_path

    out = tmp_path / "self"
    run(_config(tiny_prompts_file, samples=1, temperature=0.0, draft=str(embedded_gguf_path())), out, progress=False)
    speculative = [r for r in read_records(out / "records.jsonl") if r["engine"] == "speculative"]
    proposed, accepted = sum(r["proposed"] for r in speculative), sum(r["accepted"] for r in speculative)
    assert proposed > 0 and accepted / proposed > 0.8  # the target drafting for itself is (up to batch numerics) always right
    # β = Σ min(p, q) at each output position, p and q teacher-forced by llama.cpp along the record:
    # what rejection sampling would accept; 1 where the draft is the target (greedy: the argmaxes agree)
    for record in speculative:
        assert record["position_beta"] == [1.0] * len(record["output_token_ids"])


@needs_llama_cpp
def test_analyze_scores_with_llama_cpps_own_logits(tmp_path, tiny_prompts_file, monkeypatch):
    """The snapshot's equivalence comes from llama.cpp's logits: analyze must not load the torch model."""
    import specaudit.models
    from specaudit.analysis import analyze
    from specaudit.engines import run

    out = tmp_path / "run"
    run(_config(tiny_prompts_file, samples=3), out, progress=False)

    def no_torch_model(*args, **kwargs):
        raise AssertionError("analyze loaded the torch model for a llama.cpp run")

    monkeypatch.setattr(specaudit.models, "load_pair", no_torch_model)
    snapshot = snapshot_document(analyze(out, n_boot=50))
    engines = snapshot["equivalence"]["engines"]
    assert set(engines) == {"vanilla", "speculative"}
    assert engines["vanilla"]["goodness_of_fit"]["impossible_tokens"]["statistic"] == 0  # every emitted token has p > 0 under llama.cpp
    assert snapshot["equivalence"]["status"] in ("PASS", "FAIL")


# ----------------------------------------------------------------------------- the OpenAI server (llama.cpp needed)
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(gguf: Path, port: int, *extra: str) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_threads",
        "1",
        "--n_ctx",
        "2048",
        "--verbose",
        "False",
        *extra,
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited: {process.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                return process
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError("llama_cpp.server did not answer within 120 s")


@pytest.fixture(scope="module")
def llama_servers():
    if not HAVE_LLAMA_CPP or importlib.util.find_spec("uvicorn") is None:
        pytest.skip("llama-cpp-python[server] is not installed (pip install specaudit[llama-cpp])")
    from specaudit.models._loading import embedded_gguf_path

    gguf = embedded_gguf_path()
    ports = _free_port(), _free_port()
    processes = [
        _start_server(gguf, ports[0]),
        _start_server(gguf, ports[1], "--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", "4"),
    ]
    try:
        yield f"http://127.0.0.1:{ports[0]}/v1", f"http://127.0.0.1:{ports[1]}/v1"
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)


@needs_llama_cpp
def test_endpoint_audits_llama_cpp_python_server_with_and_without_prompt_lookup(tmp_path, tiny_prompts_file, llama_servers):
    """A real third-party server through `--engines endpoint`: llama-cpp-python's OpenAI server, one
    instance plain and one with `--draft_model prompt-lookup-decoding`, asked for the run's sampler
    chain with every other stage neutral (its request defaults are min_p 0.05, repeat_penalty 1.1)."""
    from specaudit.engines import run

    vanilla_url, speculative_url = llama_servers
    neutral = {k: v for k, v in backend.NEUTRAL_SAMPLERS.items() if v is not None}
    settings = {
        "vanilla_url": vanilla_url,
        "speculative_url": speculative_url,
        "prompt_as": "text",
        "logprobs": 0,
        "concurrency": 1,
        "extra_body": {**neutral, "top_k": 0},
    }  # the server refuses top_k -1; 0 is off in llama.cpp
    cfg = RunConfig(
        engines="endpoint", prompts=str(tiny_prompts_file), samples=2, max_new_tokens=16, seed=3, warmup=1, extra={"endpoint": settings}
    )
    out = tmp_path / "endpoint"
    summary = run(cfg, out, progress=False)
    records = read_records(out / "records.jsonl")
    assert summary.written == len(records) == 4 * 2 * 2
    assert {r["engine"] for r in records} == {"vanilla", "speculative"}
    for record in records:
        assert record["backend"] == "endpoint" and record["finish_reason"] in ("eos", "length")
        assert record["text"] and 1 <= len(record["output_token_ids"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["extra"]["endpoint"]["prompt_as"] == "text"  # the endpoint's settings section

    # The server decodes with the same llama.cpp, sampler chain and 32-bit seed as the in-process
    # backend, so its plain instance must give the in-process vanilla text for the same seeds.
    local = tmp_path / "local"
    run(_config(tiny_prompts_file, max_new_tokens=16), local, progress=False)
    local_text = {r["key"]: r["text"] for r in read_records(local / "records.jsonl") if r["engine"] == "vanilla"}
    served_text = {r["key"]: r["text"] for r in records if r["engine"] == "vanilla"}
    same = sum(local_text[key].strip() == served_text[key].strip() for key in served_text)
    assert same >= len(served_text) - 1, (same, len(served_text))


# ----------------------------------------------------------------------------- the screen beside llama.cpp
def _llama_cpp_run(accept: list[int], prompt_length: int, k: int, max_new_tokens: int) -> list[tuple[int, list[int]]]:
    """The draft calls of one llama.cpp run along a path whose position t the greedy draft gets right
    iff accept[t]: the prompt pass emits position 0, then each step starting at j offers k tokens."""
    output, calls, j = list(range(len(accept))), [], 1
    while j < len(accept):
        proposal = [output[j + i] if j + i < len(accept) and accept[j + i] else -1 for i in range(k)]
        calls.append((prompt_length + j, proposal))
        kept = next((i for i, token in enumerate(proposal) if j + i >= len(accept) or token != output[j + i]), k)
        j += kept + 1
    return calls


def test_prompt_pass_counts_are_llama_cpps_own_bookkeeping_on_every_path():
    """On every 0/1 path the screen's programme for llama.cpp gives the counts llama.cpp's own records
    give (acceptance_per_step); being multilinear in a_t, it then gives their expectation when the
    positions accept independently with probabilities a_t."""
    import itertools

    from specaudit.stats.acceptance import expected_run_rate, prompt_pass_counts

    # a path as long as the budget, and one that ended at end-of-sequence 3 tokens before it (the
    # last step still offered drafts up to the budget)
    for k, length, budget in ((1, 5, 5), (3, 7, 7), (4, 8, 8), (4, 6, 9)):
        for accept in itertools.product((0, 1), repeat=length):
            output = list(range(length))
            proposed, accepted = backend.acceptance_per_step(_llama_cpp_run(list(accept), 10, k, budget), 10, output, budget)
            steps, expected_proposed, expected_accepted, _ = prompt_pass_counts([float(a) for a in accept], k, budget)
            assert (steps, expected_proposed, expected_accepted) == (len(proposed), sum(proposed), sum(accepted))
            if sum(proposed):
                rate = expected_run_rate([float(a) for a in accept], k, budget, prompt_pass=True)
                assert rate == pytest.approx(sum(accepted) / sum(proposed))


@needs_llama_cpp
def test_the_screen_beside_llama_cpp_samples_every_prompt_and_the_engines_the_subset(tmp_path, tiny_prompts_file):
    """`--engines screen,llama-cpp` with the target drafting for itself: a screen record for every
    prompt and sample, whose tokens are the vanilla engine's for the same seed (reading the logits
    changes no draw), with β_t = 1 (q = p) and the rule's a_t = p_t(argmax q_t) = max p_t < 1 at
    T = 1; its counts are llama.cpp's step structure over those a_t; analysis measures acceptance
    per group from the screen."""
    from specaudit.analysis import analyze
    from specaudit.engines import run
    from specaudit.models._loading import embedded_gguf_path
    from specaudit.stats.acceptance import prompt_pass_counts

    out = tmp_path / "screened"
    run(_config(tiny_prompts_file, engines="screen,llama-cpp", samples=3, draft=str(embedded_gguf_path())), out, progress=False)
    records = read_records(out / "records.jsonl")
    by_engine = {e: [r for r in records if r["engine"] == e] for e in ("screen", "vanilla", "speculative")}
    assert len(by_engine["screen"]) == 4 * 3 and len(by_engine["vanilla"]) == len(by_engine["speculative"]) == 2 * 3  # one prompt per group
    vanilla = {(r["prompt_id"], r["sample"]): r["output_token_ids"] for r in by_engine["vanilla"]}
    for record in by_engine["screen"]:
        if (record["prompt_id"], record["sample"]) in vanilla:
            assert record["output_token_ids"] == vanilla[(record["prompt_id"], record["sample"])]
        assert record["wall_s"] is None and record["screen"]["steps"] == "prompt pass"
        assert record["position_beta"] == pytest.approx([1.0] * len(record["output_token_ids"]), abs=1e-9)
        accept = record["position_accept"]
        assert all(0.0 < a <= 1.0 for a in accept) and min(accept) < 1.0  # sampling at T = 1: the argmax is not certain
        steps, proposed, accepted, reached = prompt_pass_counts(accept, 4, 16)
        assert (record["steps"], record["proposed"], record["accepted"], record["expected_reached"]) == pytest.approx(
            (steps, proposed, accepted, reached)
        )
    snapshot = snapshot_document(analyze(out, n_boot=50))
    assert snapshot["run"]["disparity_engine"] == "screen"
    groups = snapshot["groups"]["group"]["by_group"]
    assert {g["n_prompts"] for g in groups.values()} == {2}  # acceptance on every prompt, not only the engines' subset
    for group in groups.values():
        assert group["metrics"]["mean_beta"]["value"] == pytest.approx(1.0, abs=1e-6)
        assert 0.0 < group["metrics"]["acceptance_rate"]["value"] < 1.0


def test_the_screen_runs_beside_llama_cpp_only_with_a_draft_model(tmp_path, tiny_prompts_file, capsys):
    assert (
        main(
            ["run", "--engines", "screen,llama-cpp", "--draft", "ngram", "--prompts", str(tiny_prompts_file), "--out", str(tmp_path / "a")]
        )
        == 2
    )
    assert "prompt lookup has no draft distribution to screen" in capsys.readouterr().err
    with pytest.raises(InputError, match="the screen runs with the local engines"):
        RunConfig(engines="screen,endpoint", prompts=str(tiny_prompts_file))
    with pytest.raises(InputError, match="runs alone"):
        RunConfig(engines="screen,llama-cpp,vanilla", prompts=str(tiny_prompts_file))
