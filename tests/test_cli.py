"""Bad input reaches the user as one sentence and exit code 2, never a traceback."""

import subprocess
import sys

import pytest

from specaudit.cli import main


def _cli(*args):
    result = subprocess.run([sys.executable, "-m", "specaudit.cli", *args], capture_output=True, text=True)
    return result.returncode, result.stdout, result.stderr


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--k", "0"], "--k must be an integer >= 1"),
        (["--temperature", "-1"], "temperature must be >= 0"),
        (["--top-p", "1.5"], "top-p must be in (0, 1]"),
        (["--engines", "vanilla,warp-drive"], "unknown engine(s) warp-drive"),
        (["--target", "/nonexistent/model"], "model path '/nonexistent/model' does not exist"),
        (["--target", "no-such-org/no-such-model-xyz"], "cannot load model 'no-such-org/no-such-model-xyz'"),
        (["--draft", "early-exit:x"], "early-exit:N"),
        (["--verify", "nowhere:nothing"], "--verify 'nowhere:nothing'"),
    ],
)
def test_bad_flags_exit_2_with_one_sentence(tmp_path, tiny_pair_dir, tiny_prompts_file, flags, message, capsys):
    target, draft = tiny_pair_dir
    base = [
        "run",
        "--target",
        str(target),
        "--draft",
        str(draft),
        "--prompts",
        str(tiny_prompts_file),
        "--out",
        str(tmp_path / "o"),
        "--quiet",
    ]
    code = main([*base, *flags])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err
    errors = [line for line in err.splitlines() if not line.startswith("specaudit: warning:")]
    assert "Traceback" not in err and len(errors) == 1 and errors[0].startswith("specaudit: error:")


@pytest.mark.slow
def test_vocabulary_mismatch_names_both_sizes(tmp_path, tiny_pair_dir, tiny_prompts_file):
    from transformers import AutoTokenizer

    from specaudit.models import tiny_model

    target, _ = tiny_pair_dir
    other = tmp_path / "other"
    model = tiny_model(seed=4, vocab_size=90)
    model.save_pretrained(other)
    tokenizer = AutoTokenizer.from_pretrained(target)
    tokenizer.add_tokens([f"<extra{i}>" for i in range(5)])
    tokenizer.save_pretrained(other)
    code, _, err = _cli(
        "run", "--target", str(target), "--draft", str(other), "--prompts", str(tiny_prompts_file), "--out", str(tmp_path / "o")
    )
    assert code == 2
    assert "83 tokens" in err and "78" in err and "same tokenizer" in err
    assert "Traceback" not in err and not (tmp_path / "o" / "records.jsonl").exists()


def test_unknown_flag_is_exit_2():
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--no-such-flag"])
    assert exit_info.value.code == 2


@pytest.mark.parametrize(
    "yaml_text, message",
    [
        ("k: four\n", "error: k must be an integer >= 1, got 'four'"),
        ("temperature: hot\n", "error: temperature must be a number, got 'hot'"),
        ("chat_template: maybe\n", "error: chat_template must be true or false, got 'maybe'"),
        ("samples: true\n", "error: samples must be an integer >= 1, got True"),
        ("max_new_tokens: 8\nwarp_factor: 9\n", "unknown option(s) warp_factor"),
        (
            "engines: endpoint\nendpoint:\n  speculative_url: http://a/v1\n  vanilla_url: http://b/v1\n  concurrency: 0\n",
            "endpoint.concurrency must be an integer >= 1, got 0",
        ),
        (
            "engines: endpoint\nendpoint:\n  speculative_url: http://a/v1\n  vanilla_url: http://b/v1\n  timeout_s: soon\n",
            "endpoint.timeout_s must be a number > 0, got 'soon'",
        ),
    ],
)
def test_bad_config_file_values_are_one_sentence_naming_field_and_value(tmp_path, tiny_prompts_file, yaml_text, message, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(yaml_text)
    code = main(["run", "--config", str(config), "--prompts", str(tiny_prompts_file), "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert "Traceback" not in err and err.count("specaudit: error:") == 1 and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--pair", "qwen9"], "--pair 'qwen9' is not a named pair; the named pairs are: qwen2.5-coder"),
        (["--pair", "qwen2.5-coder", "--draft", "ngram"], "--pair names both models; drop --draft, or --pair"),
    ],
)
def test_a_bad_pair_audit_is_one_sentence_before_anything_is_fetched(tmp_path, flags, message, capsys):
    code = main(["audit", *flags, "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_a_pair_audit_is_the_pairs_models_screened_beside_llama_cpp_over_five_dimensions():
    from specaudit.audit import PAIR_DIMENSIONS, pair_budget
    from specaudit.config import RunConfig

    full, quick = pair_budget("qwen2.5-coder", quick=False), pair_budget("qwen2.5-coder", quick=True)
    assert (full["target"], full["draft"], full["engines"]) == ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", ("screen", "llama-cpp"))
    assert full["dimensions"] == PAIR_DIMENSIONS and (quick["dimensions"], quick["per_group"]) == (("language",), 8)
    for budget in (full, quick):
        RunConfig(**{k: v for k, v in budget.items() if k != "dimensions"}, dimensions=budget["dimensions"])  # a valid run
