"""`--engines endpoint` against the reference server over real HTTP, on the tiny models.

Two ReferenceServers run in this process on 127.0.0.1 (port 0): one vanilla, one speculative
(the correct rejection step, or a self-test mutant). The endpoint backend must record exactly
what the servers returned, resume, report server errors as one sentence with exit code 2, record
the servers' acceptance counters, and pass the equivalence audit against the correct server
while failing it against a mutant, without any local model at analysis time.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from specaudit.analysis import analyze
from specaudit.cli import main
from specaudit.config import RunConfig
from specaudit.contracts.snapshot import snapshot_document
from specaudit.decoding import reference_verify
from specaudit.engines import run
from specaudit.engines.endpoint.client import output_tokens, request_body
from specaudit.engines.http.client import Endpoint
from specaudit.engines.spec_counters import parse_metrics
from specaudit.errors import InputError
from specaudit.execution.plan import derive_seed
from specaudit.execution.records import read_records
from specaudit.selftest.mutants import MUTANTS
from specaudit.testing.server import ReferenceServer

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # 2-prompt groups: the prompt-set warning is expected


class _BrokenDraft(torch.nn.Module):
    """A draft whose forward pass fails, as a server's crashed kernel would (a failing verify
    function is a finding of the audit, recorded on the record, not a server error)."""

    config = None  # what a KV cache asks of a model before its first call

    def forward(self, *args, **kwargs):
        raise RuntimeError("verification kernel crashed")


@pytest.fixture(scope="module")
def pair(tiny_pair_dir):
    from specaudit.models import load_pair

    target, draft = tiny_pair_dir
    return load_pair(str(target), str(draft), device="cpu")


@pytest.fixture(scope="module")
def servers(pair):
    with ReferenceServer(pair, speculative=True) as speculative, ReferenceServer(pair) as vanilla:
        yield speculative, vanilla


def _config(tiny_pair_dir, prompts, speculative, vanilla, *, endpoint=None, **options) -> RunConfig:
    settings = {"speculative_url": speculative.url, "vanilla_url": vanilla.url, "concurrency": 2, **(endpoint or {})}
    base = dict(target=str(tiny_pair_dir[0]), engines="endpoint", prompts=str(prompts), samples=2, max_new_tokens=12, seed=5, warmup=0)
    return RunConfig(**{**base, **options}, endpoint=settings)


# ----------------------------------------------------------------------------- (a) records
def test_records_are_what_the_servers_returned_and_match_local_engines(tmp_path, pair, servers, tiny_pair_dir, tiny_prompts_file):
    speculative, vanilla = servers
    cfg = _config(tiny_pair_dir, tiny_prompts_file, speculative, vanilla, warmup=1)
    summary = run(cfg, tmp_path / "ep", progress=False)
    records = read_records(tmp_path / "ep" / "records.jsonl")
    assert summary.written == summary.records == len(records) == 4 * 2 * 2
    assert {r["engine"] for r in records} == {"vanilla", "speculative"}
    assert {r["key"] for r in records} == {f"p{i}|{e}|{s}" for i in range(1, 5) for e in ("vanilla", "speculative") for s in (0, 1)}
    for r in records:
        assert r["backend"] == "endpoint" and r["token_ids_source"] == "server"
        assert r["accepted_per_step"] == r["beta"] == []
        if r["engine"] == "vanilla":
            assert r["steps"] == r["proposed"] == r["accepted"] == 0 and "server_acceptance" not in r
        else:  # the server's own per-request counts (vLLM's metrics.speculative_decoding shape)
            assert r["server_acceptance"]["source"] == "metrics.speculative_decoding"
            # vLLM's num_spec_steps counts the steps that drafted, not the target's passes: steps unobserved (0)
            assert 0 <= r["accepted"] <= r["proposed"] and r["steps"] == 0 and r["server_acceptance"]["drafted_steps"] >= 1
        assert r["draft_s"] is None and r["wall_s"] > 0 and r["ttft_s"] is not None  # streamed by default
        assert len(r["target_logprobs"]) == len(r["output_token_ids"]) >= 1
        assert all(len(e["top"]) <= 20 for e in r["target_logprobs"])
        assert r["seed"] == derive_seed(5, r["prompt_id"], r["sample"])
    # the record holds what the server answers to the same request (non-streamed here)
    record = next(r for r in records if r["engine"] == "speculative")
    body = request_body(cfg, {**cfg.engine_settings("endpoint"), "stream": False}, "target", record["prompt_token_ids"], record["seed"], 12)
    answer = Endpoint(speculative.url, setting="endpoint.speculative_url").complete(body)
    ids, logprobs = output_tokens(answer, 20)
    assert ids == record["output_token_ids"] and answer.text == record["text"]
    assert logprobs == record["target_logprobs"]
    # ... and the servers decode with specaudit's own engines: same seeds give the local runner's tokens
    target, draft = tiny_pair_dir
    local = RunConfig(
        target=str(target),
        draft=str(draft),
        engines="vanilla,speculative",
        prompts=str(tiny_prompts_file),
        samples=2,
        max_new_tokens=12,
        seed=5,
        warmup=0,
        device="cpu",
    )
    run(local, tmp_path / "local", pair=pair, progress=False)
    local_records = read_records(tmp_path / "local" / "records.jsonl")
    expected = {r["key"]: r["output_token_ids"] for r in local_records}
    assert {r["key"]: r["output_token_ids"] for r in records} == expected
    counts = lambda rs: {r["key"]: (r["proposed"], r["accepted"]) for r in rs if r["engine"] == "speculative"}  # noqa: E731
    assert counts(records) == counts(local_records)  # the server's per-request acceptance is the engine's own
    # its num_spec_steps (the steps that drafted: every step of the reference engine) kept beside the record
    drafted = {r["key"]: r["server_acceptance"]["drafted_steps"] for r in records if r["engine"] == "speculative"}
    assert drafted == {r["key"]: r["steps"] for r in local_records if r["engine"] == "speculative"}
    manifest = json.loads((tmp_path / "ep" / "manifest.json").read_text())
    assert manifest["backend"] == "endpoint" and manifest["models"]["speculative"]["url"] == speculative.url
    assert manifest["endpoint"]["token_ids"] == ["server"]


def test_resume_keeps_records_and_refuses_other_settings(tmp_path, servers, tiny_pair_dir, tiny_prompts_file):
    speculative, vanilla = servers
    cfg = _config(tiny_pair_dir, tiny_prompts_file, speculative, vanilla, endpoint={"api_key": "sk-secret-123"})
    run(cfg, tmp_path / "ep", progress=False)
    path = tmp_path / "ep" / "records.jsonl"
    full = read_records(path)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-3]) + lines[-3][:25])  # a kill: three records lost, one torn mid-line
    with pytest.warns(UserWarning, match="torn"):
        again = run(cfg, tmp_path / "ep", progress=False)
    assert again.written == 3 and again.skipped == len(full) - 3
    resumed = read_records(path)
    strip = lambda rs: sorted((r["key"], r["output_token_ids"], r["target_logprobs"]) for r in rs)  # noqa: E731
    assert strip(resumed) == strip(full)
    manifest_text = (tmp_path / "ep" / "manifest.json").read_text()
    assert "sk-secret-123" not in manifest_text and json.loads(manifest_text)["invocations"] == 2
    with pytest.raises(InputError, match="other settings.*logprobs"):
        run(_config(tiny_pair_dir, tiny_prompts_file, speculative, vanilla, endpoint={"logprobs": 5}), tmp_path / "ep", progress=False)


def test_without_token_ids_outputs_are_retokenised_and_scored_locally(tmp_path, servers, tiny_pair_dir, tiny_prompts_file):
    speculative, vanilla = servers
    cfg = _config(tiny_pair_dir, tiny_prompts_file, speculative, vanilla, samples=1, max_new_tokens=8, endpoint={"logprobs": 0})
    run(cfg, tmp_path / "ep", progress=False)
    records = read_records(tmp_path / "ep" / "records.jsonl")
    assert all(r["token_ids_source"] == "re-tokenised text" and r["target_logprobs"] is None for r in records)
    manifest = json.loads((tmp_path / "ep" / "manifest.json").read_text())
    assert "re-tokenised" in manifest["endpoint"]["token_ids_note"]
    snapshot = snapshot_document(analyze(tmp_path / "ep", n_boot=20))  # no logprobs: the local target (the config's) scores the outputs
    assert "draft_scoring" in snapshot["equivalence"] and "scoring" not in snapshot["equivalence"]
    assert set(snapshot["equivalence"]["engines"]) == {"vanilla", "speculative"}


# ----------------------------------------------------------------------------- (b) the audit
def _audit(tmp_path, name, verify, pair, tiny_pair_dir, tiny_prompts_file):
    with ReferenceServer(pair, speculative=True, verify=verify) as speculative, ReferenceServer(pair) as vanilla:
        # `target` points nowhere: the analysis must not need a local model (tokenizer given apart)
        cfg = _config(
            tiny_pair_dir,
            tiny_prompts_file,
            speculative,
            vanilla,
            target="/nonexistent/served-model",
            samples=10,
            max_new_tokens=24,
            seed=0,
            endpoint={"tokenizer": str(tiny_pair_dir[0])},
        )
        run(cfg, tmp_path / name, progress=False)
    return snapshot_document(analyze(tmp_path / name, n_boot=50))


@pytest.mark.slow
def test_audit_passes_correct_server_and_fails_always_accept_mutant(tmp_path, pair, tiny_pair_dir, tiny_prompts_file):
    correct = _audit(tmp_path, "correct", reference_verify, pair, tiny_pair_dir, tiny_prompts_file)
    mutant = _audit(tmp_path, "mutant", MUTANTS["always_accept"], pair, tiny_pair_dir, tiny_prompts_file)
    for snapshot in (correct, mutant):
        eq = snapshot["equivalence"]
        assert eq["scoring"]["source"].startswith("logprobs returned")
        assert eq["engines"]["vanilla"]["verdict"] == "PASS"  # the control passes on both runs
        assert snapshot["run"]["n_output_tokens"] > 900  # both engines; measured 978 (correct) and 1433 (mutant)
    assert correct["equivalence"]["status"] == "PASS"
    spec = correct["equivalence"]["engines"]["speculative"]
    assert spec["goodness_of_fit"]["tests"]["pit"]["pvalue"] > 0.1
    assert min(t["pvalue"] for t in spec["two_sample"]["tests"].values()) > 0.1
    assert mutant["equivalence"]["status"] == "FAIL"
    bad = mutant["equivalence"]["engines"]["speculative"]
    assert bad["goodness_of_fit"]["tests"]["pit"]["pvalue"] < 1e-6  # the draft's choices show in the target's PIT
    assert bad["two_sample"]["tests"]["loglik"]["pvalue"] < 0.01  # black-box too: the log-likelihoods the server returned
    from specaudit.report import render_report

    html = Path(render_report(mutant, tmp_path / "mutant")["html"]).read_text()
    assert "(speculation on)" in html and "(speculation off)" in html and "127.0.0.1" in html  # the servers, not a config default


# ----------------------------------------------------------------------------- (c) errors
def _cli_run(tmp_path, settings: dict, capsys, **options) -> tuple[int, str]:
    config = {"engines": "endpoint", "samples": 1, "max_new_tokens": 6, "warmup": 0, **options, "endpoint": settings}
    path = tmp_path / "endpoint.yaml"
    path.write_text(yaml.safe_dump(config))
    code = main(["run", "--config", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if not line.startswith("specaudit: warning:")]
    assert "Traceback" not in err and len(errors) <= 1
    return code, (errors[0] if errors else "")


def test_server_down_is_one_sentence_exit_2(tmp_path, pair, servers, tiny_pair_dir, tiny_prompts_file, capsys):
    _, vanilla = servers
    gone = ReferenceServer(pair, speculative=True).start()
    url = gone.url
    gone.close()
    code, error = _cli_run(
        tmp_path, {"speculative_url": url, "vanilla_url": vanilla.url}, capsys, target=str(tiny_pair_dir[0]), prompts=str(tiny_prompts_file)
    )
    assert code == 2
    assert error.startswith("specaudit: error: endpoint.speculative_url") and url in error and "did not answer" in error
    assert not (tmp_path / "out" / "records.jsonl").exists()


def test_http_500_is_a_fault_record_the_run_goes_on_and_resume_asks_again(tmp_path, pair, tiny_pair_dir, tiny_prompts_file, capsys):
    """A server that answers 500 (its draft kernel crashed) is a finding: each failed request is a
    fault line with the server's own message, the other side's records are written, the gate FAILs
    engine-faults; the fixed server answers the faulted items on resume, and nothing is redone."""
    broken = dataclasses.replace(pair, draft=_BrokenDraft())
    with ReferenceServer(broken, speculative=True) as speculative, ReferenceServer(pair) as vanilla:
        settings = {"speculative_url": speculative.url, "vanilla_url": vanilla.url, "concurrency": 1}
        options = dict(target=str(tiny_pair_dir[0]), prompts=str(tiny_prompts_file))
        code, error = _cli_run(tmp_path, settings, capsys, **options)
        assert code == 0, error  # vanilla answers between the faults: never 5 in a row
        kept = read_records(tmp_path / "out" / "records.jsonl")
        assert len(kept) == 4 and {r["engine"] for r in kept} == {"vanilla"}
        faults = [json.loads(line) for line in (tmp_path / "out" / "faults.jsonl").read_text().splitlines()]
        assert [f["engine"] for f in faults] == ["speculative"] * 4 and {f["error"] for f in faults} == {"HTTP 500"}
        assert "verification kernel crashed" in faults[0]["message"] and speculative.url in faults[0]["message"]
        assert main(["analyze", str(tmp_path / "out")]) == 0
        assert main(["gate", str(tmp_path / "out")]) == 1
        line = next(line for line in capsys.readouterr().out.splitlines() if "engine-faults" in line)
        assert line.startswith("FAIL") and "4 engine call(s) failed on 4 plan item(s) (speculative 4)" in line, line
        assert "HTTP 500" in line and "verification kernel crashed" in line
        speculative.pair = pair  # the server is fixed: the same command asks the faulted items again
        code, error = _cli_run(tmp_path, settings, capsys, **options)
        assert code == 0, error
    records = read_records(tmp_path / "out" / "records.jsonl")
    assert len(records) == 8 and records[:4] == kept  # the vanilla records were not redone
    assert len((tmp_path / "out" / "faults.jsonl").read_text().splitlines()) == 4  # the faults stay on file
    invariants = snapshot_document(analyze(tmp_path / "out"))["output_invariants"]  # the server's texts and ids, over HTTP, agree
    assert invariants["status"] == "PASS" and invariants["records"] == 8 and "text" in invariants["checked"], invariants["message"]


@pytest.mark.parametrize(
    "settings, options, message",
    [
        ({"vanilla_url": "http://127.0.0.1:9/v1"}, {}, "endpoint.speculative_url is missing"),
        ({"speculative_url": "127.0.0.1:8000", "vanilla_url": "http://127.0.0.1:9/v1"}, {}, "is not an http(s) URL"),
        ({"speculative_url": "http://a/v1", "vanilla_url": "http://b/v1", "concurency": 2}, {}, "unknown setting(s) concurency"),
        ({"speculative_url": "http://a/v1", "vanilla_url": "http://b/v1", "logprobs_mode": "sampled"}, {}, "logprobs_mode must be one of"),
        (
            {"speculative_url": "http://a/v1", "vanilla_url": "http://b/v1"},
            {"engines": "endpoint,vanilla"},
            "the endpoint backend runs alone",
        ),
        ({"speculative_url": "http://a/v1", "vanilla_url": "http://b/v1"}, {"engines": "vanilla"}, "write --engines endpoint"),
        (
            {"speculative_url": "http://a/v1", "vanilla_url": "http://b/v1", "mix_sampling": "t=1,top_q=0.9"},
            {},
            "endpoint.mix_sampling: 't=1,top_q=0.9': 'top_q' is not a sampling setting; did you mean",
        ),
        ({"speculative_url": "http://a/v1", "vanilla_url": "http://b/v1", "mix_in_flight": 0}, {}, "mix_in_flight"),
    ],
)
def test_bad_config_is_one_sentence_exit_2(tmp_path, capsys, settings, options, message):
    code, error = _cli_run(tmp_path, settings, capsys, **options)
    assert code == 2 and message in error, error


def test_endpoint_engine_needs_its_section():
    with pytest.raises(
        InputError, match="needs the servers: --speculative-url URL --vanilla-url URL, or an `extra: {endpoint: ...}` section"
    ):
        RunConfig(engines="endpoint")


# ----------------------------------------------------------------------------- (c2) mixed traffic
def test_mixed_traffic_shares_the_servers_batches_and_is_not_recorded(tmp_path, pair, servers, tiny_pair_dir, tiny_prompts_file):
    from specaudit.report.view.subject import subject

    speculative, vanilla = servers
    before = speculative.counters["requests"], vanilla.counters["requests"]
    cfg = _config(
        tiny_pair_dir,
        tiny_prompts_file,
        speculative,
        vanilla,
        endpoint={"mix_sampling": "t=1,top_p=0.9", "mix_in_flight": 2},
        temperature=0.0,
    )
    run(cfg, tmp_path / "mixed", progress=False)
    records = read_records(tmp_path / "mixed" / "records.jsonl")
    mixed = json.loads((tmp_path / "mixed" / "manifest.json").read_text())["endpoint"]["mixed_traffic"]
    assert mixed["sampling"] == "t=1,top_p=0.9" and mixed["in_flight"] == 2
    device = json.loads((tmp_path / "mixed" / "manifest.json").read_text())["device"]
    assert device["load"].startswith("mixed traffic: requests at t=1,top_p=0.9 kept in flight on each server")
    assert min(mixed["answered"].values()) > 0 and mixed["failed"] == {"speculative": 0, "vanilla": 0}
    # only the plan is recorded; every background request reached its server besides them
    by_engine = {engine: sum(r["engine"] == engine for r in records) for engine in ("speculative", "vanilla")}
    assert speculative.counters["requests"] - before[0] == by_engine["speculative"] + mixed["answered"]["speculative"]
    assert vanilla.counters["requests"] - before[1] == by_engine["vanilla"] + mixed["answered"]["vanilla"]
    assert all(r["sampling"]["temperature"] == 0.0 for r in records)
    # the correct server's greedy outputs are the vanilla server's, load or not
    outputs = {(r["prompt_id"], r["sample"], r["engine"]): r["output_token_ids"] for r in records}
    assert all(outputs[(p, s, "speculative")] == ids for (p, s, engine), ids in outputs.items() if engine == "vanilla")
    # the report's subject says under what load the audit ran
    rows = dict(subject(analyze(tmp_path / "mixed", pair=pair, n_boot=50, seed=0)))
    assert rows["Load"] == device["load"]


# ----------------------------------------------------------------------------- (d) server metrics
def test_server_metrics_deltas_in_manifest(tmp_path, servers, tiny_pair_dir, tiny_prompts_file):
    speculative, vanilla = servers
    before = dict(speculative.counters), list(speculative.accepted_per_position)
    cfg = _config(tiny_pair_dir, tiny_prompts_file, speculative, vanilla, endpoint={"metrics_url": speculative.metrics_url})
    run(cfg, tmp_path / "ep", progress=False)
    metrics = json.loads((tmp_path / "ep" / "manifest.json").read_text())["server_metrics"]
    counters = metrics["counters"]
    assert counters["vllm:spec_decode_num_drafts"] == speculative.counters["drafts"] - before[0]["drafts"] > 0
    assert counters["vllm:spec_decode_num_draft_tokens"] == speculative.counters["draft_tokens"] - before[0]["draft_tokens"]
    accepted = speculative.counters["accepted_tokens"] - before[0]["accepted_tokens"]
    assert counters["vllm:spec_decode_num_accepted_tokens"] == accepted
    assert metrics["accepted_per_position"] == [a - b for a, b in zip(speculative.accepted_per_position, before[1])]
    assert len(metrics["accepted_per_position"]) == 4 and sum(metrics["accepted_per_position"]) == accepted
    assert metrics["acceptance_rate"] == pytest.approx(accepted / counters["vllm:spec_decode_num_draft_tokens"])
    # prometheus_client's exposition (with _total and several label sets) parses to the same sums
    text = speculative.metrics_text() + 'vllm:spec_decode_num_drafts_total{engine="1"} 2.0\n'
    assert parse_metrics(text)["vllm:spec_decode_num_drafts"] == speculative.counters["drafts"] + 2


def test_metrics_labels_holding_commas_quotes_and_braces_parse():
    """A label value may hold ',', '=', '}' and escaped quotes (the old hand parser split on ','
    and counted `position=2` inside a model name as a second position)."""
    text = (
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n"
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m,position=2",position="1"} 3.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m} \\"q\\"",position="0"} 4.0\n'
        'vllm:spec_decode_num_drafts_total{model_name="a, b=c"} 5\n'
        'vllm:spec_decode_num_drafts{engine="1"} 2\n'
    )
    assert parse_metrics(text) == {"vllm:spec_decode_num_drafts": 7.0, "per_position": [4.0, 3.0]}
    with pytest.raises(InputError, match="did not return Prometheus text"):
        parse_metrics("<html>not metrics</html>\n")


# ----------------------------------------------------------------------------- the reference server itself
def test_reference_server_speaks_the_openai_completions_api(servers):
    speculative, _ = servers
    client = Endpoint(speculative.url, setting="endpoint.speculative_url")
    assert client.served_models() == [speculative.model_name]
    answer = client.complete({"prompt": "Hello", "max_tokens": 5, "seed": 1, "logprobs": 3, "top_k": 5, "temperature": 0.8})
    ids, logprobs = output_tokens(answer, 3)
    assert 1 <= len(ids) <= 5 and answer.finish_reason in ("stop", "length") and answer.usage["completion_tokens"] == len(ids)
    assert all(len(e["top"]) == 3 and e["top"][0][1] >= e["top"][-1][1] for e in logprobs)
    # logprobs are of the warped target: with top_k = 5 the 5 kept tokens hold all the mass
    full = client.complete({"prompt": "Hello", "max_tokens": 3, "seed": 1, "logprobs": 5, "top_k": 5, "temperature": 0.8})
    assert all(sum(math.exp(lp) for _, lp in e["top"]) == pytest.approx(1.0, abs=1e-9) for e in output_tokens(full, 5)[1])
    plain = client.complete({"prompt": "Hello", "max_tokens": 5, "seed": 1})
    assert plain.tokens is None and plain.text and output_tokens(plain, 0) == (None, None)
    with pytest.raises(InputError, match=r"HTTP 400 \(temperature must be >= 0"):
        client.complete({"prompt": "Hello", "temperature": -1})
    with pytest.raises(InputError, match="HTTP 404.*does not exist"):
        client.complete({"prompt": "Hello", "model": "gpt-9"})


def test_reference_server_command_line_errors(capsys):
    from specaudit.testing.server import main as serve

    assert serve(["--target", "unused", "--speculative"]) == 2
    assert "--speculative needs --draft" in capsys.readouterr().err


def test_logprobs_in_the_chat_content_shape_give_token_ids_and_logprobs():
    """llama-server answers /v1/completions with `logprobs.content` (the chat API's shape): ids
    and logprobs come from it, as from vLLM's token_id:N lists."""
    from specaudit.engines.endpoint.client import output_tokens
    from specaudit.engines.http._responses import CompletionPart

    entry = {
        "id": 253,
        "token": " a",
        "logprob": -0.5,
        "top_logprobs": [{"id": 354, "token": " an", "logprob": -0.2}, {"id": 253, "logprob": -0.5}],
    }
    part = CompletionPart.model_validate({"choices": [{"text": " a", "logprobs": {"content": [entry]}}]})
    logprobs = part.choices[0].logprobs
    assert logprobs.tokens == ["token_id:253"] and logprobs.token_logprobs == [-0.5]
    assert logprobs.top_logprobs == [{"token_id:354": -0.2, "token_id:253": -0.5}]
    completion = type(
        "C",
        (),
        {
            "tokens": logprobs.tokens,
            "token_ids": None,
            "all_token_ids": None,
            "token_logprobs": logprobs.token_logprobs,
            "top_logprobs": logprobs.top_logprobs,
        },
    )
    ids, target = output_tokens(completion, top_n=2)
    assert ids == [253] and target is not None and len(target) == 1
    with pytest.raises(ValueError):  # an id in that shape is checked like any other
        CompletionPart.model_validate({"choices": [{"text": "x", "logprobs": {"content": [{**entry, "id": -1}]}}]})
