"""`specaudit prompts ...` through specaudit.cli.main, and the statistics behind `stats`."""

from __future__ import annotations

import json

import pytest
from prompt_factory import read_jsonl, write_jsonl
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from specaudit.cli import main
from specaudit.prompts import load_prompts, prompt_set_stats, update_checksums, validate_prompt_set


@pytest.fixture
def sets_dir(small_set, monkeypatch):
    monkeypatch.setenv("SPECAUDIT_PROMPT_SETS", str(small_set.parent))
    return small_set


def punctuation_tokenizer():
    """A real HF tokenizer (built locally) that splits punctuation off words, so tokens != words."""
    backend = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")


def test_stats_counts_and_lengths(small_set):
    prompt_set = load_prompts(small_set)
    words = prompt_set_stats(prompt_set)
    assert list(words["group"]) == ["common", "rare", "code", "news", "sae", "aave", "scottish"]
    assert list(words["prompts"]) == [6, 6, 6, 6, 6, 6, 6]
    assert list(words["pairs"]) == [6, 6, 0, 0, 6, 6, 6]
    assert set(words["unit"]) == {"words"} and not words["below_min_size"].any()
    code = words[words["group"] == "code"].iloc[0]
    # "Write a short code item number i." is 7 words ...
    assert (code["length_min"], code["length_median"], code["length_max"]) == (7, 7.0, 7)
    tokens = prompt_set_stats(prompt_set, tokenizer=punctuation_tokenizer())
    code = tokens[tokens["group"] == "code"].iloc[0]
    # ... and 8 tokens once the full stop is its own token.
    assert code["unit"] == "tokens" and code["length_median"] == 8.0
    assert bool(tokens[tokens["group"] == "sae"]["reference"].iloc[0])


def test_list_and_show(sets_dir, capsys):
    assert main(["prompts", "list"]) == 0
    out = capsys.readouterr().out
    assert "small  v3  42 prompts" in out and "sae*, aave, scottish" in out
    assert main(["prompts", "show", "small", "--rows", "1"]) == 0
    out = capsys.readouterr().out
    assert "dialect: dialect.jsonl, 18 rows, parallel, reference sae" in out
    assert "[dialect-0-sae]" in out and "[dialect-0-aave]" not in out


def test_validate_exit_codes(sets_dir, capsys):
    assert main(["prompts", "validate", "small"]) == 0
    assert "42 valid prompts, 0 error(s)" in capsys.readouterr().out
    rows = read_jsonl(sets_dir / "domain.jsonl")
    rows[2]["id"] = rows[0]["id"]
    write_jsonl(sets_dir / "domain.jsonl", rows)
    assert main(["prompts", "validate", str(sets_dir)]) == 2
    err = capsys.readouterr().err
    assert "domain.jsonl line 3, field 'id': duplicate id 'domain-code-0'" in err
    assert "checksum mismatch" in err and "2 error(s)" in err


def test_stats_command(sets_dir, capsys):
    assert main(["prompts", "stats", "small", "--tokenizer", "none"]) == 0
    out = capsys.readouterr().out
    assert "every group has at least 4 prompts" in out and "scottish" in out
    assert main(["prompts", "stats", "small", "--tokenizer", "none", "--dimensions", "dialect", "--per-group", "2"]) == 0
    out = capsys.readouterr().out
    assert "6 prompts" in out and "domain" not in out.split("\n", 1)[1]


def test_checksum_write_refreshes_manifest(sets_dir, capsys):
    manifest = sets_dir / "manifest.yaml"
    rows = read_jsonl(sets_dir / "domain.jsonl")
    write_jsonl(sets_dir / "domain.jsonl", rows + [{**rows[0], "id": "domain-code-extra", "text": "One more prompt."}])
    assert main(["prompts", "validate", "small"]) == 2
    capsys.readouterr()
    assert main(["prompts", "checksum", "small"]) == 0
    out = capsys.readouterr().out
    assert "domain.jsonl" in out and "[changed]" in out and "out of date" in out
    assert "rows: 12" in manifest.read_text()  # not written without --write
    assert main(["prompts", "checksum", "small", "--write"]) == 0
    assert "manifest.yaml updated" in capsys.readouterr().out
    text = manifest.read_text()
    assert text.startswith("# test set") and "rows: 13" in text  # comments above `files:` survive
    assert validate_prompt_set(sets_dir).ok
    assert all(e.status == "ok" for e in update_checksums(sets_dir))


def test_checksum_refuses_a_torn_file(sets_dir):
    path = sets_dir / "dialect.jsonl"
    path.write_text(path.read_text() + '{"id": "x", "te\n')
    before = (sets_dir / "manifest.yaml").read_text()
    assert main(["prompts", "checksum", "small", "--write"]) == 2
    assert (sets_dir / "manifest.yaml").read_text() == before


def test_input_errors_exit_2(sets_dir, capsys):
    assert main(["prompts", "validate", "nonexistent"]) == 2
    assert "no prompt set, file or dataset named 'nonexistent'" in capsys.readouterr().err
    assert main(["prompts", "stats", "small", "--tokenizer", "none", "--per-group", "0"]) == 2
    assert "per_group must be a positive integer" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # argparse: unknown action
        main(["prompts", "frobnicate"])
    assert exited.value.code == 2


def test_validate_user_file_with_column_map(tmp_path, capsys):
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps({"q": f"question {i}", "cat": "a" if i % 2 else "b"}) + "\n" for i in range(4)))
    assert main(["prompts", "validate", str(path), "--column-map", "text=q,group:topic=cat"]) == 0
    out = capsys.readouterr().out
    assert "group 'a' has 2 prompt(s), fewer than the set's minimum of 30" in out and "4 valid prompts" in out


@pytest.mark.integration
def test_stats_with_the_default_tokenizer(sets_dir, capsys):
    assert main(["prompts", "stats", "small"]) == 0
    assert "tokens" in capsys.readouterr().out


def test_word_fallback_counts_cjk_characters():
    from specaudit.prompts._stats import count_words

    assert count_words("Explain  the phases\nof the moon.") == 6
    # No spaces in Chinese or Japanese: each Han/kana character counts, punctuation runs count once.
    assert count_words("请解释月相。") == 6
    assert count_words("月の満ち欠け OK") == 7
