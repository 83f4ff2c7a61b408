"""The shipped `long` prompt set: valid, stratified by length as its datasheet says, on the
default tokenizer (the length band of every prompt is its group's)."""

from __future__ import annotations

from specaudit.cli import main
from specaudit.models import load_tokenizer
from specaudit.prompts import load_prompts, prompt_token_ids
from specaudit.stats.context import context_band

BAND_OF_GROUP = {"short": "<256", "medium": "256-1k", "long": "1k-4k"}


def test_the_long_set_validates_without_findings(capsys):
    assert main(["prompts", "validate", "long"]) == 0
    assert "long: 9 valid prompts, 0 error(s), 0 warning(s)" in capsys.readouterr().out


def test_every_prompt_is_in_its_groups_band_and_every_task_in_every_band():
    tokenizer = load_tokenizer("default")
    prompts = load_prompts("long").prompts
    cells = set()
    for prompt in prompts:
        tokens = len(prompt_token_ids(tokenizer, prompt))
        group = prompt.attributes["length"]
        assert context_band(tokens) == BAND_OF_GROUP[group], (prompt.id, tokens)
        assert prompt.metadata["default_tokens"] == tokens  # the datasheet's counts are the tokenizer's
        cells.add((group, prompt.metadata["task_type"]))
    assert cells == {(g, t) for g in BAND_OF_GROUP for t in ("rag_qa", "summarisation", "code_editing")}
