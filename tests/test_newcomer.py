"""A newcomer's first audit of their own server: the README's "audit your server" command, taken
from README.md as written, run against two reference servers (speculation on and off, real HTTP on
127.0.0.1, the tiny models), must produce a report with no YAML written by hand. Only the servers'
addresses, the tokenizer and the test's size (prompts, tokens) are filled in."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from specaudit.cli import main
from specaudit.contracts.snapshot import load_snapshot
from specaudit.testing.server import ReferenceServer

README = Path(__file__).resolve().parents[1] / "README.md"
pytestmark = [
    pytest.mark.slow,  # two real HTTP servers and a whole audit: about 15 s of CPU
    pytest.mark.filterwarnings("ignore::UserWarning"),  # two-prompt groups: the prompt-set warning is expected
]


def readme_server_command() -> list[str]:
    """The arguments of the README's `specaudit audit --speculative-url ...` command."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    commands = [" ".join(block.replace("\\\n", " ").split()) for block in blocks if "--speculative-url" in block]
    assert len(commands) == 1, "README has one 'audit your server' command"
    words = shlex.split(commands[0])
    assert words[:2] == ["specaudit", "audit"]
    return words[2:]


def _fill_in(words: list[str], values: dict[str, str]) -> list[str]:
    filled = list(words)
    for flag, value in values.items():
        filled[filled.index(flag) + 1] = value
    return filled


@pytest.fixture(scope="module")
def servers(tiny_pair_dir):
    from specaudit.models import load_pair

    target, draft = tiny_pair_dir
    pair = load_pair(str(target), str(draft), device="cpu")
    with ReferenceServer(pair, speculative=True) as speculative, ReferenceServer(pair) as vanilla:
        yield speculative, vanilla


def test_the_readme_command_audits_a_server_with_no_yaml_written(tmp_path, servers, tiny_pair_dir, tiny_prompts_file, monkeypatch, capsys):
    speculative, vanilla = servers
    words = readme_server_command()
    assert {"--speculative-url", "--vanilla-url", "--target", "--concurrency"} <= set(words)
    env_var = words[words.index("--api-key-env") + 1]
    monkeypatch.setenv(env_var, "a-key-the-reference-server-ignores")
    monkeypatch.chdir(tmp_path)
    argv = _fill_in(words, {"--speculative-url": speculative.url, "--vanilla-url": vanilla.url, "--target": str(tiny_pair_dir[0])})
    size = ["--prompts", str(tiny_prompts_file), "--samples", "3", "--max-new-tokens", "8", "--out", "report", "--quiet"]
    code = main(["audit", *argv, *size])
    out = capsys.readouterr().out
    assert re.search(r"^report: report/report\.html$", out, flags=re.MULTILINE)
    # correctness in the report's words (never PASS for "no test rejected"), then the decision and its exit code last
    assert re.search(r"^equivalence: (NO VIOLATION FOUND|EQUIVALENT WITHIN DELTA)  gate: (PASS|WARN|FAIL)", out, flags=re.MULTILINE)
    decision = re.fullmatch(
        r"decision: (Enable|Enable with conditions|Do not enable|Insufficient evidence)  \(exit (\d)(;.*)?\)", out.splitlines()[-1]
    )
    assert decision and int(decision.group(2)) == code == (1 if decision.group(1) == "Do not enable" else 0), out
    snapshot = load_snapshot(tmp_path / "report")
    assert set(snapshot["run"]["engines"]) == {"speculative", "vanilla"}
    assert snapshot["run"]["config"]["extra"]["endpoint"]["concurrency_levels"] == [1, 4]  # --concurrency 1,4 from the command
    assert snapshot["equivalence"]["engines"]["speculative"]["verdict"] == "PASS"
    assert (tmp_path / "report" / "report.html").stat().st_size > 10_000
    # the command recorded (and repeated in the report's advice) is the one given, not pytest's
    manifest = json.loads((tmp_path / "report" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["command"] == " ".join(["specaudit", "audit", *argv, *size])
    assert not list(tmp_path.rglob("*.yaml")) and not list(tmp_path.rglob("*.yml"))  # nothing written by hand, nothing asked for


# ----------------------------------------------------------------------------- the same against llama-server
@pytest.fixture(scope="module")
def llama_servers():
    """llama.cpp's own server on the embedded GGUF, once with prompt lookup (ngram drafting) and
    once without, started as a user would start theirs (specaudit's launcher only picks the ports
    and reaps the processes)."""
    from specaudit.engines import llama_build as build
    from specaudit.engines.llama_server.client import server_args
    from specaudit.engines.llama_server.launcher import LlamaServer, ServerPair
    from specaudit.engines.llama_server.settings import LlamaServerSettings
    from specaudit.models._loading import embedded_gguf_path

    binary = build.find_binary()
    if binary is None:
        pytest.skip(f"llama-server is not built for llama-cpp-python {build.binding_version()}: run `specaudit llama-server build`")
    settings = LlamaServerSettings(concurrency_levels=(1, 4), threads=1, ctx_per_slot=256)
    gguf = embedded_gguf_path()
    sides = {
        "speculative": server_args(gguf, settings, spec_type="ngram-simple", draft=None, k=3),
        "vanilla": server_args(gguf, settings, spec_type=None, draft=None, k=3),
    }
    with ServerPair({name: LlamaServer(binary, args, name, lifetime_s=900) for name, args in sides.items()}, startup_timeout_s=300) as pair:
        yield pair.servers["speculative"], pair.servers["vanilla"]


def test_the_readme_command_audits_llama_server_with_no_yaml_written(tmp_path, llama_servers, tiny_prompts_file, monkeypatch, capsys):
    speculative, vanilla = llama_servers
    words = readme_server_command()
    monkeypatch.setenv(words[words.index("--api-key-env") + 1], "a-key-llama-server-ignores")
    monkeypatch.chdir(tmp_path)
    # the served model's tokenizer: the embedded GGUF's, named as `specaudit audit` names it
    urls = {"--speculative-url": f"{speculative.base_url}/v1", "--vanilla-url": f"{vanilla.base_url}/v1", "--target": "default"}
    argv = _fill_in(words, urls)
    size = ["--prompts", str(tiny_prompts_file), "--samples", "2", "--max-new-tokens", "8", "--out", "report", "--quiet"]
    code = main(["audit", *argv, *size])
    out = capsys.readouterr().out
    # 0 or 1: the gate FAILs logprob parity where llama-server reports a drafted token as certain
    # (llama.cpp #27972, docs/llama-cpp.md), but the audit itself runs through and writes its report
    assert code in (0, 1), out
    assert re.search(r"^report: report/report\.html$", out, flags=re.MULTILINE)
    snapshot = load_snapshot(tmp_path / "report")
    assert set(snapshot["run"]["engines"]) == {"speculative", "vanilla"}
    assert snapshot["run"]["config"]["extra"]["endpoint"]["concurrency_levels"] == [1, 4]
    # token ids and logprobs from llama-server's answers (its `logprobs.content` shape), so the
    # white-box battery ran on the server's own tokens
    assert snapshot["equivalence"]["engines"]["speculative"]["goodness_of_fit"]["n_tokens"] > 0
    # llama-server's own sampler defaults (min_p 0.05) are not left to apply: the control passes
    assert snapshot["equivalence"]["engines"]["vanilla"]["verdict"] == "PASS", out
    # llama-server reports its drafts per request (timings.draft_n): the audit measured acceptance
    rows = [row for row in snapshot["prompts"] if row.get("acceptance_rate") is not None]
    assert rows, "no per-prompt acceptance from llama-server's timings"
    assert (tmp_path / "report" / "report.html").stat().st_size > 10_000
    assert not list(tmp_path.rglob("*.yaml")) and not list(tmp_path.rglob("*.yml"))
