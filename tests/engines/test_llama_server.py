"""`--engines llama-server`: llama.cpp's own server, built from the sources llama-cpp-python vendors
(`specaudit llama-server build`), started and stopped by specaudit.

The fast checks (settings, command lines, requests, the plan per concurrency level, reading an
answer, the build cache, process supervision) need no llama-server. The integration test runs the
real binary on the embedded SmolLM2 GGUF and skips, saying why, where it is not built.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specaudit.config import RunConfig
from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE, PlanItem
from specaudit.contracts.snapshot import snapshot_document
from specaudit.engines import llama_build as build_module
from specaudit.engines.levels import level_plan
from specaudit.engines.llama_server.client import NEUTRAL_SAMPLING, SAMPLER_ORDER, generation_of, request_body, server_args
from specaudit.engines.llama_server.launcher import LlamaServer, ServerPair, stop_all
from specaudit.engines.llama_server.settings import server_settings, spec_type_for
from specaudit.errors import InputError
from specaudit.prompts._model import Prompt


# ----------------------------------------------------------------------------- settings
def test_settings_defaults_and_slots():
    settings = server_settings({})
    assert settings.concurrency_levels == (1, 4) and settings.slots == 4
    assert server_settings({"llama_server": {"concurrency-levels": "1,2,8"}}).slots == 8


@pytest.mark.parametrize(
    "section, message",
    [
        ({"concurrency_levels": [1, 0]}, "concurrency_levels must be integers >= 1"),
        ({"concurrency_levels": [2, 2]}, "has a level twice"),
        ({"concurrency_levels": "1,x"}, "must be integers such as 1,4"),
        ({"concurrency_levels": [1, 8], "parallel": 4}, "below the highest concurrency level 8"),
        ({"threads": 0}, "llama_server.threads"),
        ({"slots": 3}, "unknown setting"),
        ({"spec_type": "eagle"}, "llama_server.spec_type"),
    ],
)
def test_bad_settings_are_one_sentence(section, message):
    with pytest.raises(InputError, match=message):
        server_settings({"llama_server": section})


def test_spec_type_follows_the_draft():
    settings = server_settings({})
    assert spec_type_for("ngram", settings) == "ngram-simple"
    assert spec_type_for("/m/draft.gguf", settings) == "draft-simple"
    assert spec_type_for("ngram", server_settings({"llama_server": {"spec_type": "ngram-mod"}})) == "ngram-mod"
    with pytest.raises(InputError, match="needs a GGUF --draft"):
        spec_type_for("ngram", server_settings({"llama_server": {"spec_type": "draft-simple"}}))
    with pytest.raises(InputError, match="write --draft ngram"):
        spec_type_for("/m/draft.gguf", server_settings({"llama_server": {"spec_type": "ngram-simple"}}))


def test_llama_server_defaults_to_ngram_drafting_unless_a_draft_is_named():
    assert RunConfig(engines="llama-server").draft == "ngram"
    assert RunConfig(engines="llama-server", draft="/m/draft.gguf").draft == "/m/draft.gguf"
    assert RunConfig().draft == "int8"  # other engines keep their default


# ----------------------------------------------------------------------------- command lines and requests
def test_server_args_off_and_on():
    settings = server_settings({"llama_server": {"concurrency_levels": [1, 2], "ctx_per_slot": 512, "threads": 1}})
    off = server_args(Path("/m/t.gguf"), settings, spec_type=None, draft=None, k=4)
    assert off[:6] == ["-m", "/m/t.gguf", "-np", "2", "-c", "1024"] and "--spec-type" not in off
    on = server_args(Path("/m/t.gguf"), settings, spec_type="ngram-simple", draft=None, k=3)
    assert on[on.index("--spec-type") + 1] == "ngram-simple" and on[on.index("--spec-draft-n-max") + 1] == "3"
    assert on[on.index("--spec-ngram-simple-size-m") + 1] == "3"
    draft = server_args(Path("/m/t.gguf"), settings, spec_type="draft-simple", draft=Path("/m/d.gguf"), k=4)
    assert draft[draft.index("--spec-draft-model") + 1] == "/m/d.gguf"
    with pytest.raises(InputError, match="needs a GGUF --draft"):
        server_args(Path("/m/t.gguf"), settings, spec_type="draft-simple", draft=None, k=4)


def test_request_sets_every_sampling_stage():
    cfg = RunConfig(engines="llama-server", temperature=0.7, top_k=20, top_p=0.9)
    body = request_body(cfg, [1, 2, 3], seed=(5 << 40) + 77, max_tokens=16)
    assert (body["temperature"], body["top_k"], body["top_p"], body["n_predict"]) == (0.7, 20, 0.9, 16)
    assert body["samplers"] == SAMPLER_ORDER == ["temperature", "top_k", "top_p"]
    assert {k: body[k] for k in NEUTRAL_SAMPLING} == NEUTRAL_SAMPLING
    assert body["seed"] == 77  # the low 32 bits, as the in-process llama.cpp engine seeds
    assert body["cache_prompt"] is False and body["return_tokens"] is True and body["prompt"] == [1, 2, 3]


# ----------------------------------------------------------------------------- the plan per level
def test_level_plan_gives_each_level_its_own_samples():
    prompt = Prompt(id="p", text="x", attributes={})
    plan = [PlanItem(prompt, CONTROL_ENGINE, 0), PlanItem(prompt, SPECULATIVE_ENGINE, 0), PlanItem(prompt, SPECULATIVE_ENGINE, 1)]
    plan.append(PlanItem(prompt, CONTROL_ENGINE, "t0", True))
    expanded = level_plan(plan, (1, 4), samples=2, timing_repeats=1)
    assert [level for level, _ in expanded] == [1, 1, 1, 1, 4, 4, 4, 4]
    assert [item.sample for _, item in expanded] == [0, 0, 1, "t0", 2, 2, 3, "t1"]
    assert len({item.key for _, item in expanded}) == len(expanded)


# ----------------------------------------------------------------------------- reading an answer
def _final(tokens_n: int, stop_type: str, draft: tuple[int, int] | None = None) -> dict:
    timings = {"prompt_n": 10, "prompt_ms": 5.0, "predicted_n": tokens_n, "predicted_ms": 40.0}
    if draft:
        timings.update(draft_n=draft[0], draft_n_accepted=draft[1])
    return {"content": "", "stop": True, "stop_type": stop_type, "timings": timings}


def test_generation_counts_steps_from_the_servers_acceptance():
    generation, acceptance, times = generation_of(_final(10, "limit", (12, 6)), list(range(10, 20)), 0.5, 0.1, {2}, 10)
    assert (generation.proposed, generation.accepted, generation.steps, generation.finish_reason) == (12, 6, 4, "length")
    assert acceptance.source == "timings.draft_n" and times["prompt_ms"] == 5.0


def test_generation_ends_with_the_eos_token_it_stopped_on():
    generation, acceptance, _ = generation_of(_final(3, "eos"), [5, 6], 0.2, None, {2}, 8)
    assert generation.tokens == [5, 6, 2] and generation.finish_reason == "eos" and acceptance is None
    assert generation.ttft_s == 0.2  # no token streamed before the end: the whole answer's time
    kept, _, _ = generation_of(_final(3, "eos"), [5, 6, 2], 0.2, 0.1, {2}, 8)
    assert kept.tokens == [5, 6, 2]


def test_generation_refuses_an_unknown_stop():
    with pytest.raises(InputError, match="stop_type 'bogus'"):
        generation_of(_final(2, "bogus"), [5, 6], 0.1, 0.1, {2}, 8)
    stopped, _, _ = generation_of(_final(2, "word"), [5, 6], 0.1, 0.1, {2}, 8)  # a stop string (specaudit sends `stop`)
    assert stopped.finish_reason == "stop"


# ----------------------------------------------------------------------------- the build cache
def test_build_returns_a_cached_binary_without_building(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECAUDIT_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECAUDIT_LLAMA_SERVER", raising=False)
    folder = tmp_path / "llama-server" / "9.9.9"
    folder.mkdir(parents=True)
    for name in build_module.BINARIES:
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod((folder / name).stat().st_mode | stat.S_IEXEC)
    binary = folder / "llama-server"
    assert build_module.cached_binary("9.9.9") is None  # no stamp: an unfinished build
    (folder / build_module.STAMP).write_text(json.dumps({"build_s": 1.0, "binaries": list(build_module.BINARIES)}))
    monkeypatch.setattr(build_module, "_tool", lambda name: pytest.fail("a cached build must not look for cmake"))
    assert build_module.build("9.9.9", quiet=True) == binary
    assert build_module.cached_binary("9.9.9", build_module.SPECULATIVE) == folder / "llama-speculative"


def test_a_cache_from_before_llama_speculative_is_rebuilt(tmp_path, monkeypatch):
    """A stamp without `binaries` (llama-server alone, the build before llama-speculative) serves
    llama-server still, but build() builds both again rather than return it."""
    monkeypatch.setenv("SPECAUDIT_CACHE", str(tmp_path))
    folder = tmp_path / "llama-server" / "9.9.9"
    folder.mkdir(parents=True)
    for name in build_module.BINARIES:  # even with a stray llama-speculative beside it: the stamp does not vouch for it
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod((folder / name).stat().st_mode | stat.S_IEXEC)
    (folder / build_module.STAMP).write_text(json.dumps({"build_s": 1.0}))
    assert build_module.cached_binary("9.9.9") == folder / "llama-server"
    assert build_module.cached_binary("9.9.9", build_module.SPECULATIVE) is None

    def no_cmake(name):
        raise InputError("cmake looked for: a rebuild")

    monkeypatch.setattr(build_module, "_tool", no_cmake)
    with pytest.raises(InputError, match="a rebuild"):
        build_module.build("9.9.9", quiet=True)


def test_build_of_a_broken_sdist_is_one_sentence_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECAUDIT_CACHE", str(tmp_path))
    sdist = tmp_path / "llama_cpp_python-9.9.9.tar.gz"
    sdist.write_bytes(b"not a tar file")
    with pytest.raises(InputError, match="is not a readable sdist"):
        build_module.build("9.9.9", sdist=sdist, quiet=True)
    assert build_module.cached_binary("9.9.9") is None
    assert not [p for p in (tmp_path / "llama-server").iterdir() if p.name.startswith(".build-")]


def test_missing_binary_says_how_to_build(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECAUDIT_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECAUDIT_LLAMA_SERVER", raising=False)
    with pytest.raises(InputError, match="specaudit llama-server build"):
        build_module.require_binary()
    monkeypatch.setenv("SPECAUDIT_LLAMA_SERVER", str(tmp_path / "nope"))
    with pytest.raises(InputError, match="not an executable file"):
        build_module.require_binary()
    monkeypatch.delenv("SPECAUDIT_LLAMA_SPECULATIVE", raising=False)
    with pytest.raises(InputError, match="llama-speculative is not built .* SPECAUDIT_LLAMA_SPECULATIVE"):
        build_module.require_binary(build_module.SPECULATIVE)


# ----------------------------------------------------------------------------- process supervision
# The launcher's job (ports, readiness, reaping) does not depend on what the process serves, so it
# is checked on a stand-in that takes llama-server's --host/--port and answers /health; the real
# binary is run by the integration test below.
STAND_IN = textwrap.dedent(
    """\
    import sys, time
    from http.server import BaseHTTPRequestHandler, HTTPServer
    args = sys.argv[1:]
    if "--fail" in args:
        print("error: loading model failed", flush=True); sys.exit(3)
    if "--slow" in args:
        time.sleep(60)
    class Health(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
        def log_message(self, *a):
            pass
    HTTPServer((args[args.index("--host") + 1], int(args[args.index("--port") + 1])), Health).serve_forever()
    """
)


@pytest.fixture
def stand_in(tmp_path) -> Path:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    binary = tmp_path / "llama-server"
    binary.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    return binary


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_servers_start_on_loopback_ports_and_are_reaped(stand_in):
    pair = ServerPair({name: LlamaServer(stand_in, [], name) for name in ("vanilla", "speculative")}, startup_timeout_s=30)
    with pair:
        ports = {server.port for server in pair.servers.values()}
        assert len(ports) == 2 and all(server.base_url.startswith("http://127.0.0.1:") for server in pair.servers.values())
        pids = [server.process.pid for server in pair.servers.values()]
    assert all(_gone(pid) for pid in pids)


def test_a_server_that_fails_to_start_stops_the_other(stand_in):
    pair = ServerPair(
        {"vanilla": LlamaServer(stand_in, [], "vanilla"), "speculative": LlamaServer(stand_in, ["--fail"], "speculative")}, 30
    )
    with pytest.raises(InputError, match="exited with status 3 while starting: error: loading model failed"):
        pair.start()
    assert not pair.servers["vanilla"].alive()


def test_startup_timeout_kills_the_process(stand_in):
    server = LlamaServer(stand_in, ["--slow"], "vanilla")
    with pytest.raises(InputError, match="did not become ready within 1 s"):
        server.start(timeout_s=1)
    assert not server.alive()


def test_keyboard_interrupt_inside_the_run_reaps_both(stand_in):
    pair = ServerPair({name: LlamaServer(stand_in, [], name) for name in ("vanilla", "speculative")}, startup_timeout_s=30)
    with pytest.raises(KeyboardInterrupt), pair:
        pids = [server.process.pid for server in pair.servers.values()]
        raise KeyboardInterrupt
    assert all(_gone(pid) for pid in pids)


def test_lifetime_bounds_a_forgotten_server(stand_in):
    server = LlamaServer(stand_in, [], "vanilla", lifetime_s=1.0).start(timeout_s=30)
    pid = server.process.pid
    for _ in range(100):  # the watchdog fires after 1 s; poll, with no timed assertion
        if not server.alive():
            break
        time.sleep(0.1)
    assert not server.alive() and _gone(pid)
    stop_all()


# ----------------------------------------------------------------------------- the real llama-server
def _binary_or_skip() -> Path:
    binary = build_module.find_binary()
    if binary is None:
        pytest.skip(f"llama-server is not built for llama-cpp-python {build_module.binding_version()}: run `specaudit llama-server build`")
    return binary


def _children_named(name: str) -> list[int]:
    """Live child processes of this test process whose command line names `name`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        parent = next((line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), None)
        if parent == str(os.getpid()) and name in cmdline and "State:\tZ" not in status:
            found.append(int(entry.name))
    return found


_RUN_PROMPTS: dict = {}
REPEATING = "Repeat this line three times exactly: the red fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def llama_server_run(tmp_path_factory):
    """A real --engines llama-server run: the embedded GGUF, ngram drafting, greedy, 8 tokens,
    three prompts in two groups, at concurrency 1 and 2."""
    _binary_or_skip()
    from specaudit.engines import run
    from specaudit.prompts._model import PromptSet, rows_checksum

    texts = {"rep": REPEATING, "poem": "Write a short poem about rain.", "list": "List the days of the week, separated by commas."}
    rows = [Prompt(id=i, text=t, attributes={"group": "b" if i == "list" else "a"}) for i, t in texts.items()]
    prompts = PromptSet(name="llama-server-test", version=1, checksum=rows_checksum(rows), source="memory", dimensions={}, prompts=rows)
    cfg = RunConfig(
        engines="llama-server",
        temperature=0.0,
        max_new_tokens=8,
        k=3,
        warmup=0,
        extra={"llama_server": {"concurrency_levels": [1, 2], "threads": 1, "ctx_per_slot": 256, "startup_timeout_s": 600.0}},
    )
    out = tmp_path_factory.mktemp("llama-server") / "run"
    run(cfg, out, prompt_set=prompts, progress=False)
    _RUN_PROMPTS["llama-server"] = prompts  # the resume test re-runs with the same prompts
    return out


@pytest.mark.slow
def test_llama_server_run_records_both_sides_at_each_level(llama_server_run):
    from specaudit.execution.records import read_manifest, read_records

    records = read_records(llama_server_run / "records.jsonl")
    assert len(records) == 3 * 2 * 2 and len({r["key"] for r in records}) == 12
    assert {(r["engine"], r["concurrency"]) for r in records} == {(e, c) for e in (CONTROL_ENGINE, SPECULATIVE_ENGINE) for c in (1, 2)}
    assert all(0 < len(r["output_token_ids"]) <= 8 and r["backend"] == "llama-server" for r in records)
    spec = [r for r in records if r["engine"] == SPECULATIVE_ENGINE]
    # Acceptance comes from the server's own timings: the repeating prompt gives prompt lookup drafts.
    drafted = [r for r in spec if r["acceptance_source"] == "timings.draft_n"]
    assert drafted and all(0 <= r["accepted"] <= r["proposed"] for r in drafted)
    manifest = read_manifest(llama_server_run)
    assert manifest["llama-server"]["identity"]["concurrency_levels"] == [1, 2]
    assert "--spec-type" in manifest["llama-server"]["commands"]["speculative"]
    assert not _children_named("llama-server")  # both processes were stopped


@pytest.mark.slow
def test_llama_server_run_resumes_without_requests(llama_server_run):
    from specaudit.engines import run

    summary = run(
        RunConfig(
            engines="llama-server",
            temperature=0.0,
            max_new_tokens=8,
            k=3,
            warmup=0,
            extra={"llama_server": {"concurrency_levels": [1, 2], "threads": 1, "ctx_per_slot": 256, "startup_timeout_s": 600.0}},
        ),
        llama_server_run,
        prompt_set=_RUN_PROMPTS["llama-server"],
        progress=False,
    )
    assert (summary.written, summary.skipped, summary.records) == (0, 12, 12)


@pytest.mark.slow
def test_llama_server_run_analyzes_per_level(llama_server_run):
    pytest.importorskip("llama_cpp", reason="analyze scores llama.cpp runs with llama-cpp-python's logits; it is not installed")
    from specaudit.analysis import analyze

    snapshot = snapshot_document(analyze(llama_server_run, n_boot=100))
    section = snapshot["concurrency"]
    assert section["levels"] == [1, 2] and set(section["equivalence"]) == {"1", "2"}
    assert set(section["groups"]["group"]) == {"a", "b"}
    acceptance = section["groups"]["group"]["a"]["1"]["acceptance"]
    assert acceptance is not None and 0.0 <= acceptance["estimate"] <= 1.0
