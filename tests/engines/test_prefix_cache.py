"""Prefix caching as an audit axis (`--prefix-cache cold,warm`, issue 38 item 4): the flag and
its refusals, the plan per cache state, the requests of each state (llama-server's `cache_prompt`
and `id_slot`, an endpoint's `cache_salt`), what the records carry, the per-state analysis, and
a real llama-server run on the embedded GGUF (skipped where it is not built)."""

from __future__ import annotations

import json

import pytest
import yaml

from specaudit.analysis.equivalence import Battery
from specaudit.analysis.prefix_cache import judge_by_state, judged_in_state, prefix_cache_section, states_of
from specaudit.cli import main
from specaudit.config import RunConfig
from specaudit.contracts.run import (
    CACHED_TOKENS_FIELD,
    COLD,
    CONTROL_ENGINE,
    PREFIX_CACHE_FIELD,
    SPECULATIVE_ENGINE,
    WARM,
    PlanItem,
    Record,
    cache_fields,
)
from specaudit.contracts.snapshot import EngineEquivalence, EquivalenceSection, PrefixCacheSection, snapshot_document
from specaudit.engines.endpoint.client import cached_prompt_tokens
from specaudit.engines.endpoint.client import request_body as endpoint_body
from specaudit.engines.http.client import Completion
from specaudit.engines.levels import pass_plan
from specaudit.engines.llama_server.client import cached_tokens, request_body
from specaudit.errors import InputError
from specaudit.prompts._model import Prompt

SPEC, PLAIN = "http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1"
ENDPOINT = {"speculative_url": SPEC, "vanilla_url": PLAIN}


# ----------------------------------------------------------------------------- the flag
@pytest.mark.parametrize(
    ("given", "states"), [("cold,warm", (COLD, WARM)), ("warm", (WARM,)), (["cold"], (COLD,)), ("warm, cold", (WARM, COLD))]
)
def test_states_are_read_from_a_comma_list_or_a_config_list(given, states):
    cfg = RunConfig(engines="llama-server", prefix_cache=given)
    assert cfg.prefix_cache == states
    assert cfg.decoding_identity()["prefix_cache"] == list(states)  # a run folder resumes only with the same states
    assert cfg.to_dict()["prefix_cache"] == list(states)
    assert RunConfig(engines="endpoint", endpoint=ENDPOINT, prefix_cache=given).prefix_cache == states


def test_runs_without_the_flag_keep_their_identity_and_manifest():
    cfg = RunConfig(engines="llama-server")
    assert cfg.prefix_cache is None and "prefix_cache" not in cfg.decoding_identity() and "prefix_cache" not in cfg.to_dict()


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"engines": "llama-server", "prefix_cache": "hot"}, "--prefix-cache takes cold, warm or cold,warm"),
        ({"engines": "llama-server", "prefix_cache": "cold,cold"}, "each state once"),
        ({"engines": "llama-server", "prefix_cache": ""}, "got nothing"),
        ({"engines": "vanilla,speculative", "prefix_cache": "warm"}, "--engines vanilla cannot run --prefix-cache warm: it keeps no"),
        ({"engines": "llama-cpp", "prefix_cache": "cold,warm"}, "clears llama.cpp's KV cache before every record"),
        ({"engines": "openvino", "prefix_cache": "warm"}, "--engines openvino cannot run --prefix-cache warm: OpenVINO GenAI's prefix"),
        ({"engines": "vllm", "prefix_cache": "warm"}, "enable_prefix_caching"),
    ],
)
def test_bad_states_and_engines_without_a_per_request_cache_are_refused(options, said):
    with pytest.raises(InputError, match="^[^\n]*$") as err:
        RunConfig(**options)
    assert said in str(err.value)


def test_the_flag_and_the_config_key_reach_the_run(tmp_path, capsys, monkeypatch):
    from specaudit.cli import build_parser
    from specaudit.cli.run import _run_config

    args = build_parser().parse_args(["run", "--out", "x", "--engines", "llama-server", "--prefix-cache", "cold,warm"])
    assert _run_config(args).prefix_cache == (COLD, WARM)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"engines": "llama-server", "prefix_cache": ["warm"]}))
    assert _run_config(build_parser().parse_args(["run", "--out", "x", "--config", str(config)])).prefix_cache == (WARM,)
    monkeypatch.chdir(tmp_path)
    for argv, said in (
        (["run", "--out", "x", "--engines", "openvino", "--prefix-cache", "warm"], "--engines openvino cannot run"),
        (["run", "--out", "x", "--engines", "llama-server", "--prefix-cache", "lukewarm"], "--prefix-cache takes"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and said in err.strip().splitlines()[-1]
    assert not (tmp_path / "x").exists()


def test_dry_run_counts_the_cache_states(capsys, tmp_path, monkeypatch, tiny_prompts_file, reference_servers):
    monkeypatch.chdir(tmp_path)
    speculative, vanilla = reference_servers
    argv = ["audit", "--dry-run", "--speculative-url", speculative.url, "--vanilla-url", vanilla.url, "--target", "default"]
    assert main([*argv, "--concurrency", "1,4", "--prompts", str(tiny_prompts_file), "--prefix-cache", "cold,warm"]) == 0  # nothing decoded
    out = capsys.readouterr().out
    assert "x 2 concurrency levels (1, 4); x 2 prompt-cache states (cold, warm)" in out
    assert "each warm request follows a one-token priming request" in out
    assert not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------- the plan and the requests
def test_each_level_and_state_is_a_pass_with_its_own_samples():
    prompt = Prompt(id="p", text="x", attributes={})
    plan = [PlanItem(prompt, CONTROL_ENGINE, 0), PlanItem(prompt, CONTROL_ENGINE, 1), PlanItem(prompt, CONTROL_ENGINE, "t0", True)]
    expanded = pass_plan(plan, (1, 4), (COLD, WARM), samples=2, timing_repeats=1)
    passes = [one for one, _ in expanded]
    assert passes == [(1, COLD)] * 3 + [(1, WARM)] * 3 + [(4, COLD)] * 3 + [(4, WARM)] * 3  # level-major, cold first
    assert [item.sample for _, item in expanded] == [0, 1, "t0", 2, 3, "t1", 4, 5, "t2", 6, 7, "t3"]
    assert [item.sample for _, item in pass_plan(plan, (None,), (None,), 2, 1)] == [0, 1, "t0"]  # no axis: the plan's own labels


def test_llama_server_cold_requests_reuse_nothing_and_warm_ones_name_their_slot():
    cfg = RunConfig(engines="llama-server")
    cold = request_body(cfg, [1, 2, 3], 7, 8)
    assert cold["cache_prompt"] is False and "id_slot" not in cold
    warm = request_body(cfg, [1, 2, 3], 7, 8, slot=2)
    assert warm["cache_prompt"] is True and warm["id_slot"] == 2
    assert {k: v for k, v in warm.items() if k not in ("cache_prompt", "id_slot")} == {k: v for k, v in cold.items() if k != "cache_prompt"}
    assert cached_tokens({"timings": {"cache_n": 40}}) == 40
    assert cached_tokens({"timings": {}}) is None and cached_tokens({"timings": {"cache_n": -1}}) is None


def test_endpoint_requests_salt_the_cache_and_read_the_reported_reuse():
    cfg = RunConfig(engines="endpoint", endpoint=ENDPOINT, prefix_cache="cold,warm")
    settings = cfg.engine_settings("endpoint")
    salted = endpoint_body(cfg, settings, "m", [1, 2], 3, 4, cache_salt="s1")
    assert salted["cache_salt"] == "s1" and "cache_prompt" not in salted
    llama = endpoint_body(cfg, settings, "m", [1, 2], 3, 4, llama_server=True, cache_prompt=True, cache_salt="s1")
    assert llama["cache_prompt"] is True and "cache_salt" not in llama
    assert "cache_salt" not in endpoint_body(cfg, settings, "m", [1, 2], 3, 4)
    reported = Completion(text="", finish_reason="stop", usage={"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 8}})
    assert cached_prompt_tokens(reported) == 8
    assert cached_prompt_tokens(Completion(text="", finish_reason="stop", usage={"prompt_tokens": 9})) is None


def test_records_carry_the_state_and_reject_a_wrong_one():
    assert cache_fields(WARM, 12) == {PREFIX_CACHE_FIELD: WARM, CACHED_TOKENS_FIELD: 12}
    with pytest.raises(InputError, match="prefix_cache"):
        cache_fields("hot", 1)
    line = {"key": "p|vanilla|0", PREFIX_CACHE_FIELD: WARM, CACHED_TOKENS_FIELD: None}
    assert Record.from_json(line).to_json() == line
    with pytest.raises(InputError, match="cached_prompt_tokens"):
        Record.from_json({**line, CACHED_TOKENS_FIELD: -3}, "records.jsonl, line 1")


# ----------------------------------------------------------------------------- the analysis
def _record(engine: str, state: str, reused: int | None, prompt: str = "p", sample: int = 0) -> dict:
    return {
        "key": f"{prompt}|{engine}|{sample}",
        "prompt_id": prompt,
        "engine": engine,
        "sample": sample,
        "output_token_ids": [1, 2, 3],
        "wall_s": 1.0,
        "accepted": 1,
        "proposed": 2,
        "attributes": {},
        PREFIX_CACHE_FIELD: state,
        CACHED_TOKENS_FIELD: reused,
    }


def test_a_warm_miss_and_a_cold_hit_are_counted_and_left_out_of_their_state():
    records = [
        _record(CONTROL_ENGINE, COLD, 0),
        _record(SPECULATIVE_ENGINE, COLD, 5),  # not cold
        _record(CONTROL_ENGINE, WARM, 9, sample=1),
        _record(SPECULATIVE_ENGINE, WARM, 0, sample=1),  # not warm
        _record(SPECULATIVE_ENGINE, WARM, None, sample=2),  # no count: taken as warm
    ]
    assert states_of(records) == [COLD, WARM] and states_of([{"engine": "vanilla"}]) == []
    assert [judged_in_state(r) for r in records] == [True, False, True, False, True]
    section = prefix_cache_section(records, Battery(None, 0.05, 0.05, [], 0, n_boot=50, equivalence=False))
    assert (section.warm_misses, section.cold_hits, section.unverified) == (1, 1, 1)
    assert section.counts[WARM][SPECULATIVE_ENGINE] == {
        "records": 2, "judged": 1, "tokens": 6, "reused_tokens": 0, "hits": 0, "misses": 1, "unreported": 1
    }  # fmt: skip
    assert section.state_alpha == pytest.approx(0.05 / 2 / 2)  # one level: the pooled battery and the states' family
    assert "1 warm request(s) reused no prompt token" in section.message and "1 cold request(s) reused" in section.message


def test_a_failed_state_fails_the_run_naming_it():
    passed = EngineEquivalence(verdict="PASS", status="no violation found")
    failed = EngineEquivalence(verdict="FAIL", status="violation")
    pooled = EquivalenceSection(status="PASS", engines={CONTROL_ENGINE: passed, SPECULATIVE_ENGINE: passed})
    section = PrefixCacheSection(
        states=[COLD, WARM],
        state_alpha=0.0125,
        equivalence={
            COLD: EquivalenceSection(status="PASS", engines={CONTROL_ENGINE: passed, SPECULATIVE_ENGINE: passed}),
            WARM: EquivalenceSection(status="FAIL", engines={CONTROL_ENGINE: passed, SPECULATIVE_ENGINE: failed}),
        },
        failed_states=[WARM],
        message="equivalence fails on warm requests",
    )
    judged = judge_by_state(pooled, section)
    assert judged.status == "FAIL" and judged.failed_cache_states == [WARM]
    assert judged.engines[SPECULATIVE_ENGINE].verdict == "FAIL" and judged.engines[CONTROL_ENGINE].verdict == "PASS"
    assert judge_by_state(pooled, None) is pooled


# ----------------------------------------------------------------------------- the real llama-server
@pytest.fixture(scope="module")
def cached_run(tmp_path_factory):
    """--engines llama-server --prefix-cache cold,warm on the embedded GGUF: prompt lookup drafting,
    T = 1, 8 tokens, three prompts, at concurrency 1 and 2."""
    from specaudit.engines import llama_build as build_module
    from specaudit.engines import run
    from specaudit.prompts._model import PromptSet, rows_checksum

    if build_module.find_binary() is None:
        pytest.skip(f"llama-server is not built for llama-cpp-python {build_module.binding_version()}: run `specaudit llama-server build`")
    texts = {
        "rep": "Repeat this line three times exactly: the red fox jumps over the lazy dog.",
        "poem": "Write a short poem about rain.",
        "list": "List the days of the week, separated by commas.",
    }
    rows = [Prompt(id=i, text=t, attributes={"group": "b" if i == "list" else "a"}) for i, t in texts.items()]
    prompts = PromptSet(name="prefix-cache-test", version=1, checksum=rows_checksum(rows), source="memory", dimensions={}, prompts=rows)
    cfg = RunConfig(
        engines="llama-server",
        max_new_tokens=8,
        k=3,
        warmup=0,
        prefix_cache="cold,warm",
        extra={"llama_server": {"concurrency_levels": [1, 2], "threads": 1, "ctx_per_slot": 256, "startup_timeout_s": 600.0}},
    )
    out = tmp_path_factory.mktemp("prefix-cache") / "run"
    run(cfg, out, prompt_set=prompts, progress=False)
    return out


@pytest.mark.slow
def test_llama_server_warm_records_reuse_the_primed_prompt_and_cold_ones_nothing(cached_run):
    from specaudit.execution.records import read_manifest, read_records

    records = read_records(cached_run / "records.jsonl")
    assert len(records) == 3 * 2 * 2 * 2  # prompts x engines x levels x states
    passes = {(r["engine"], r["concurrency"], r[PREFIX_CACHE_FIELD]) for r in records}
    assert passes == {(e, c, s) for e in (CONTROL_ENGINE, SPECULATIVE_ENGINE) for c in (1, 2) for s in (COLD, WARM)}
    for r in records:
        if r[PREFIX_CACHE_FIELD] == WARM:  # the whole prompt but its last token came from the slot's cache
            assert 0 < r[CACHED_TOKENS_FIELD] == len(r["prompt_token_ids"]) - 1, r["key"]
        else:
            assert r[CACHED_TOKENS_FIELD] == 0, r["key"]
    manifest = read_manifest(cached_run)
    assert manifest["config"]["prefix_cache"] == [COLD, WARM] and manifest["llama-server"]["cache_prompt"]["states"] == [COLD, WARM]


@pytest.mark.slow
def test_llama_server_run_is_judged_per_cache_state(cached_run):
    pytest.importorskip("llama_cpp", reason="analyze scores llama.cpp runs with llama-cpp-python's logits; it is not installed")
    from specaudit.analysis import analyze
    from specaudit.gate import evaluate_gate

    snapshot = snapshot_document(analyze(cached_run, n_boot=100))
    section = snapshot["prefix_cache"]
    assert section["states"] == [COLD, WARM] and set(section["equivalence"]) == {COLD, WARM}
    for state in (COLD, WARM):
        assert set(section["equivalence"][state]["engines"]) == {CONTROL_ENGINE, SPECULATIVE_ENGINE}
        assert section["counts"][state][SPECULATIVE_ENGINE]["judged"] == 6
        assert section["equivalence"][state]["engines"][SPECULATIVE_ENGINE]["goodness_of_fit"]["gate"]  # its Holm table kept
    assert section["warm_misses"] == section["cold_hits"] == section["unverified"] == 0
    assert section["counts"][WARM][SPECULATIVE_ENGINE]["hits"] == 6 and section["counts"][COLD][SPECULATIVE_ENGINE]["misses"] == 6
    check = next(c for c in evaluate_gate(snapshot).checks if c.name == "prefix-cache")
    assert str(check.status) in ("PASS", "FAIL") and json.dumps(check.details)
    assert main(["report", str(cached_run)]) == 0
    summary = (cached_run / "summary.md").read_text()
    assert "## Prefix cache" in summary and "| warm | speculative |" in summary and "smallest Holm p" in summary
    assert 'id="prefix-cache"' in (cached_run / "report.html").read_text()
