"""Long prompts (600, 1,500 and 3,000 tokens): every engine either sizes its context to fit them
or refuses up front in one sentence naming the prompt, its length and the limit (exit 2), before
any record is written.

The tiny models are character-level, so a prompt of N characters is N tokens; a tiny
pair saved with a 4,096-position context decodes them all, the default 512-position one refuses.
The llama.cpp checks run on the embedded SmolLM2 GGUF (8,192 trained positions)."""

from __future__ import annotations

import importlib.util
import json
import string
from pathlib import Path

import pytest

from specaudit.cli import main
from specaudit.engines.screen._batching import token_batches
from specaudit.errors import InputError
from specaudit.execution.preflight import check_prompt_lengths
from specaudit.execution.records import read_records

LENGTHS = (600, 1500, 3000)
HAVE_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
needs_llama_cpp = pytest.mark.skipif(not HAVE_LLAMA_CPP, reason="llama-cpp-python is not installed (pip install specaudit[llama-cpp])")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # one-prompt groups: the prompt-set warning is expected


def _tiny_text(characters: int, seed: int) -> str:
    """Text of the tiny tokenizer's alphabet: `characters` tokens of varied words."""
    import random

    rng = random.Random(seed)
    words = []
    while sum(len(w) + 1 for w in words) < characters:
        words.append("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9))))
    return " ".join(words)[:characters]


def _write_prompts(path: Path, texts: dict[str, str]) -> Path:
    with open(path, "w") as handle:
        for pid, text in texts.items():
            handle.write(json.dumps({"id": pid, "text": text, "attributes": {"group": pid}}) + "\n")
    return path


def _only_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("specaudit: warning:")]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def long_tiny_pair_dir(tmp_path_factory):
    from specaudit.models import save_tiny_pair

    return save_tiny_pair(tmp_path_factory.mktemp("tiny-4k"), context=4096)


@pytest.fixture(scope="module")
def long_tiny_prompts(tmp_path_factory) -> Path:
    texts = {f"len-{n}": _tiny_text(n, seed=n) for n in LENGTHS}
    return _write_prompts(tmp_path_factory.mktemp("long") / "long.jsonl", texts)


def _extra_config(folder: Path, **extra) -> list[str]:
    """--config of a file setting `extra:` (the executors' settings have no flags)."""
    path = folder / "run.yaml"
    path.write_text(json.dumps({"extra": extra}))  # JSON is YAML
    return ["--config", str(path)]


def _run(target, draft, prompts, out, *extra):
    argv = ["run", "--target", str(target), "--draft", str(draft), "--prompts", str(prompts), "--out", str(out)]
    return main([*argv, "--max-new-tokens", "8", "--quiet", *extra])


# ----------------------------------------------------------------------------- the preflight
def test_the_longest_prompt_is_named_with_its_length_the_need_and_the_limit(tiny_pair):
    encoded = {"short": [1] * 10, "long": [1] * 600, "longer": [1] * 900}
    with pytest.raises(InputError) as caught:
        check_prompt_lengths(encoded, tiny_pair.target, 16)
    message = str(caught.value)
    assert "prompt 'longer' is 900 tokens" in message and "it needs 916 positions" in message
    assert "exceeds the model's context of 512 tokens (1 other prompt(s) too)" in message
    check_prompt_lengths({"fits": [1] * 496}, tiny_pair.target, 16)  # 496 + 16 = 512: exactly the context


def test_a_draft_with_a_shorter_context_than_the_target_is_checked_too(tiny_pair, long_tiny_pair_dir):
    from specaudit.models import load_pair

    long_pair = load_pair(str(long_tiny_pair_dir[0]), None, device="cpu")
    encoded = {"p": [1] * 1000}
    check_prompt_lengths(encoded, long_pair.target, 8)  # the 4,096-position target alone takes it
    with pytest.raises(InputError, match=r"prompt 'p' is 1000 tokens; .* exceeds the draft's context of 512 tokens"):
        check_prompt_lengths(encoded, long_pair.target, 8, draft=tiny_pair.target)


def test_k_counts_when_the_engine_drafts_past_the_budget(tiny_pair):
    check_prompt_lengths({"p": [1] * 500}, tiny_pair.target, 12)
    with pytest.raises(InputError, match=r"with --max-new-tokens 12 and k 4 it needs 516 positions"):
        check_prompt_lengths({"p": [1] * 500}, tiny_pair.target, 12, k=4)


@pytest.mark.parametrize("engines", ["vanilla,speculative", "screen", "hf-assisted"])
def test_a_prompt_over_the_tiny_context_is_refused_before_any_record(tmp_path, tiny_pair_dir, long_tiny_prompts, capsys, engines):
    out = tmp_path / "o"
    assert _run(*tiny_pair_dir, long_tiny_prompts, out, "--engines", engines) == 2
    line = _only_error_line(capsys.readouterr().err)
    assert "prompt 'len-3000' is 3000 tokens" in line and "exceeds the model's context of 512 tokens (2 other prompt(s) too)" in line
    assert not (out / "records.jsonl").exists() or read_records(out / "records.jsonl") == []


# ----------------------------------------------------------------------------- tiny models, 4,096 positions
@pytest.mark.slow
@pytest.mark.parametrize("engines", ["vanilla,speculative", "screen,vanilla,speculative"])
def test_tiny_engines_decode_prompts_of_600_1500_and_3000_tokens(tmp_path, long_tiny_pair_dir, long_tiny_prompts, engines):
    out = tmp_path / "o"
    screened = ["--engine-prompts", "3"] if "screen" in engines else []  # the cap is the screen's (refused without it)
    assert _run(*long_tiny_pair_dir, long_tiny_prompts, out, "--engines", engines, *screened) == 0
    records = read_records(out / "records.jsonl")
    expected = set(engines.split(","))
    for n in LENGTHS:
        mine = [r for r in records if r["prompt_id"] == f"len-{n}"]
        assert {r["engine"] for r in mine} == expected
        assert all(len(r["prompt_token_ids"]) == n and 1 <= len(r["output_token_ids"]) <= 8 for r in mine)


@pytest.mark.slow
def test_the_screen_batches_long_prompts_by_tokens(tmp_path, long_tiny_pair_dir, long_tiny_prompts):
    out = tmp_path / "o"
    extra = _extra_config(tmp_path, screen_batch_tokens=4000)  # 600 + 1,500 share a batch (2 x 1,509 positions), 3,000 goes alone
    assert _run(*long_tiny_pair_dir, long_tiny_prompts, out, "--engines", "screen", *extra) == 0
    rows = {r["prompt_id"]: r["screen"]["batch_rows"] for r in read_records(out / "records.jsonl")}
    assert rows == {"len-600": 2, "len-1500": 2, "len-3000": 1}


def test_token_batches_bound_rows_and_padded_positions():
    lengths = [3000, 60, 70, 1000, 65, 1000, 2000]
    batches = token_batches(lengths, 48, max_rows=2, max_tokens=None)
    assert batches == [[1, 4], [2, 3], [5, 6], [0]]  # shortest first, two rows each
    batches = token_batches(lengths, 48, max_rows=32, max_tokens=4096)
    assert batches == [[1, 4, 2], [3, 5], [6], [0]]  # 3 x 118 fit, 4 x 1,048 not; 2 x 1,048 fit, 3 x 2,048 not
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        width = max(lengths[i] for i in batch) + 48
        assert len(batch) == 1 or len(batch) * width <= 4096
    assert token_batches([5000], 48, max_rows=32, max_tokens=1024) == [[0]]  # over the budget alone: a batch of its own


def test_bad_screen_batch_settings_are_named(tmp_path, tiny_pair_dir, tiny_prompts_file, capsys):
    out = tmp_path / "o"
    assert _run(*tiny_pair_dir, tiny_prompts_file, out, "--engines", "screen", *_extra_config(tmp_path, screen_batch_tokens=0)) == 2
    assert "extra.screen_batch_tokens must be an integer >= 1, got 0" in _only_error_line(capsys.readouterr().err)


# ----------------------------------------------------------------------------- llama.cpp's context
def _smol_prompts(path: Path, lengths=LENGTHS) -> tuple[Path, dict[str, int]]:
    """Prompts of about n tokens of the SmolLM2 tokenizer each, from varied English words."""
    from specaudit.models import load_tokenizer

    tokenizer = load_tokenizer("default")
    vocabulary = "river stone lamp garden winter letter market bridge quiet yellow number travel paper window".split()
    import random

    rng = random.Random(0)
    texts = {}
    for n in lengths:
        ids = tokenizer(" ".join(rng.choice(vocabulary) for _ in range(n)), add_special_tokens=False)["input_ids"][:n]
        texts[f"len-{n}"] = tokenizer.decode(ids)
    _write_prompts(path, texts)
    from specaudit.prompts import load_prompts, prompt_token_ids

    prompt_set = load_prompts(str(path))
    return path, {p.id: len(prompt_token_ids(tokenizer, p)) for p in prompt_set.prompts}


def _llama_cfg(prompts: Path, **extra):
    from specaudit.config import RunConfig

    return RunConfig(engines="llama-cpp", draft="ngram", prompts=str(prompts), k=4, max_new_tokens=16, extra=extra)


@pytest.mark.slow
def test_llama_cpp_sizes_its_context_to_the_longest_prompt(tmp_path):
    from specaudit.engines import llama_cpp_runtime as backend
    from specaudit.engines.llama_cpp_settings import DEFAULT_CONTEXT
    from specaudit.models._loading import embedded_gguf_path

    path, lengths = _smol_prompts(tmp_path / "p.jsonl")
    encoded = {pid: [1] * n for pid, n in lengths.items()}
    gguf = {"target": embedded_gguf_path()}
    assert backend.gguf_context_length(embedded_gguf_path()) == 8192
    sized = backend.sized_settings(_llama_cfg(path), encoded, gguf)
    longest = max(lengths.values())
    assert sized["n_ctx"] >= longest + 16 + 4 and sized["n_ctx"] % backend.CONTEXT_STEP == 0 and sized["n_ctx"] - 256 < longest + 20
    short = backend.sized_settings(_llama_cfg(path), {"p": [1] * 40}, gguf)
    assert short["n_ctx"] == DEFAULT_CONTEXT  # never below the default
    with pytest.raises(InputError, match=r"prompt 'len-3000' is \d+ tokens; .* exceeds extra.llama_cpp.n_ctx of 2048 tokens"):
        backend.sized_settings(_llama_cfg(path, llama_cpp={"n_ctx": 2048}), encoded, gguf)
    with pytest.raises(InputError, match=r"prompt 'huge' is 8190 tokens; .* exceeds the context target SmolLM2.* was trained for of 8192"):
        backend.sized_settings(_llama_cfg(path), {"huge": [1] * 8190}, gguf)


@pytest.mark.slow
@needs_llama_cpp
def test_llama_cpp_ngram_completes_prompts_of_600_and_1500_tokens(tmp_path):
    # Past llama-cpp-python's default context of 512; the 3000-token prompt of the torch test adds
    # about a minute of one-thread prompt processing here and nothing the sizing does not show.
    prompts, lengths = _smol_prompts(tmp_path / "p.jsonl", lengths=(600, 1500))
    out = tmp_path / "o"
    argv = ["run", "--engines", "llama-cpp", "--target", "default", "--draft", "ngram", "--prompts", str(prompts), "--out", str(out)]
    assert main([*argv, "--k", "4", "--max-new-tokens", "16", "--temperature", "0", "--warmup", "0", "--quiet"]) == 0
    records = read_records(out / "records.jsonl")
    assert {(r["prompt_id"], r["engine"]) for r in records} == {(pid, e) for pid in lengths for e in ("vanilla", "speculative")}
    for record in records:
        assert len(record["prompt_token_ids"]) == lengths[record["prompt_id"]] and len(record["output_token_ids"]) >= 1
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["llama_cpp"]["settings"]["n_ctx"] >= max(lengths.values()) + 20
    # Greedy outputs may part at a near-tie (batched and single-token logits differ in float;
    # measured: the 600-token prompt's two engines parted at output position 12), which is the
    # audit's question (greedy exactness with logit gaps), not this test's.
    assert all(record["finish_reason"] in ("eos", "length") for record in records)


@pytest.mark.slow
@needs_llama_cpp
def test_llama_cpp_refuses_a_prompt_over_an_explicit_context_before_any_record(tmp_path, capsys):
    prompts, lengths = _smol_prompts(tmp_path / "p.jsonl", lengths=(600,))
    config = tmp_path / "run.yaml"
    config.write_text("extra:\n  llama_cpp:\n    n_ctx: 512\n")
    out = tmp_path / "o"
    argv = ["run", "--engines", "llama-cpp", "--target", "default", "--draft", "ngram", "--prompts", str(prompts), "--out", str(out)]
    assert main([*argv, "--config", str(config), "--max-new-tokens", "16", "--quiet"]) == 2
    line = _only_error_line(capsys.readouterr().err)
    assert f"prompt 'len-600' is {lengths['len-600']} tokens" in line and "exceeds extra.llama_cpp.n_ctx of 512 tokens" in line
    assert not (out / "records.jsonl").exists() or read_records(out / "records.jsonl") == []


# ----------------------------------------------------------------------------- context as an audit axis
@pytest.mark.slow
def test_analysis_reports_acceptance_and_speed_up_per_prompt_length_band(tmp_path, long_tiny_pair_dir):
    lengths = (60, 120, 180, 300, 500, 800, 1200, 1600, 2000)
    prompts = _write_prompts(tmp_path / "p.jsonl", {f"p{n}": _tiny_text(n, seed=n) for n in lengths})
    out = tmp_path / "o"
    assert main(["run", "--target", str(long_tiny_pair_dir[0]), "--draft", str(long_tiny_pair_dir[1]), "--prompts", str(prompts), "--out", str(out), "--max-new-tokens", "24", "--quiet"]) == 0  # fmt: skip
    assert main(["analyze", str(out), "--n-boot", "100"]) == 0
    snapshot = json.loads((out / "snapshot.json").read_text())
    bands = snapshot["groups"]["context"]["by_group"]  # added by itself: the prompts span three bands
    assert set(bands) == {"<256", "256-1k", "1k-4k"} and {b["n_prompts"] for b in bands.values()} == {3}
    speedup = bands["1k-4k"]["metrics"]["speedup"]
    assert speedup["ci_low"] <= speedup["value"] <= speedup["ci_high"]
    context = snapshot["context"]
    assert context["prompt_bands"] == {"<256": 3, "256-1k": 3, "1k-4k": 3}
    first = context["by_output_position"]["bands"][0]
    assert first["band"] == "0-15" and first["n_prompts"] == 9 and first["ci_low"] <= first["value"] <= first["ci_high"]
    assert [o["min_prompt_tokens"] for o in context["length_fallback"]["options"]] == [256, 1024]
    assert any("prompt length" in f for f in context["findings"])
    assert main(["report", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert "Long context: acceptance by prompt length and output position" in html and "context=1k-4k" in html


def test_dimensions_context_works_on_prompts_of_one_band(tmp_path, tiny_pair_dir, tiny_prompts_file, capsys):
    out = tmp_path / "o"
    assert _run(*tiny_pair_dir, tiny_prompts_file, out) == 0
    assert main(["analyze", str(out), "--n-boot", "50", "--no-equivalence"]) == 0
    assert "context" not in json.loads((out / "snapshot.json").read_text())["groups"]  # one band: not added by itself
    assert main(["analyze", str(out), "--n-boot", "50", "--no-equivalence", "--analyze-dimensions", "context"]) == 0
    groups = json.loads((out / "snapshot.json").read_text())["groups"]
    assert list(groups) == ["context"] and list(groups["context"]["by_group"]) == ["<256"]
    assert main(["analyze", str(out), "--no-equivalence", "--analyze-dimensions", "length"]) == 2
    assert "they have group, and the derived context" in _only_error_line(capsys.readouterr().err)


def test_vllm_checks_the_context_before_it_loads(tiny_pair_dir):
    from specaudit.engines.vllm.client import check_context

    encoded = {"short": [1] * 100, "long": [1] * 600}
    with pytest.raises(InputError, match=r"prompt 'long' is 600 tokens; .* exceeds the model's context of 512 tokens"):
        check_context(encoded, str(tiny_pair_dir[0]), {}, 16)  # the folder's config.json: 512 positions
    with pytest.raises(InputError, match=r"exceeds extra.vllm.max_model_len of 256 tokens \(1 other prompt\(s\) too\)"):
        check_context(encoded, str(tiny_pair_dir[0]), {"max_model_len": 256}, 160)
    check_context(encoded, str(tiny_pair_dir[0]), {"max_model_len": 1024}, 16)


def test_an_endpoint_that_advertises_its_context_is_checked_before_any_request(tmp_path, tiny_pair, tiny_pair_dir, capsys):
    from specaudit.testing.server import ReferenceServer

    prompts = _write_prompts(tmp_path / "p.jsonl", {"short": _tiny_text(50, 1), "long": _tiny_text(600, 2)})
    with ReferenceServer(tiny_pair, speculative=True) as speculative, ReferenceServer(tiny_pair) as vanilla:
        assert speculative.models()["data"][0]["max_model_len"] == 512  # as vLLM's /v1/models says it
        config = tmp_path / "run.yaml"
        config.write_text(json.dumps({"endpoint": {"speculative_url": speculative.url, "vanilla_url": vanilla.url}}))
        out = tmp_path / "o"
        argv = ["run", "--engines", "endpoint", "--target", str(tiny_pair_dir[0]), "--prompts", str(prompts), "--out", str(out)]
        assert main([*argv, "--config", str(config), "--max-new-tokens", "8", "--quiet"]) == 2
    line = _only_error_line(capsys.readouterr().err)
    assert "prompt 'long' is 600 tokens" in line and "exceeds the max_model_len endpoint.speculative_url advertises of 512 tokens" in line
    assert not (out / "records.jsonl").exists() or read_records(out / "records.jsonl") == []
