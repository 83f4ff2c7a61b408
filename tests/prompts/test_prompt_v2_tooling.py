"""Prompt sets v2 tooling: list and chat columns, size limit, cross-dimension near-duplicates,
length balance, provenance, and sampling of paired dimensions."""

from __future__ import annotations

import json
from collections import Counter

import datasets
import pandas as pd
import pytest
from prompt_factory import PROVENANCE, make_set, read_jsonl, write_jsonl, write_manifest

from specaudit.cli import main
from specaudit.errors import InputError
from specaudit.models._tiny import tiny_tokenizer
from specaudit.prompts import (
    MAX_PROMPT_BYTES,
    PromptSetWarning,
    load_prompts,
    prompt_set_stats,
    prompt_token_ids,
    validate_prompt_set,
)
from specaudit.prompts._checks import near_duplicates

TOPICS = ["tides", "volcanoes", "rainbows", "glaciers"]


def peer_rows(n: int = 4) -> list[dict]:
    """An MT-Bench-like peer set: each prompt is a list of user turns, grouped by category."""
    return [
        {
            "question_id": 100 + i,
            "category": "writing" if i % 2 else "reasoning",
            "turns": [f"Explain {TOPICS[i % 4]} to a child, case {i}.", f"Now shorten that, case {i}."],
        }
        for i in range(n)
    ]


# ------------------------------------------------------------------ list fields and chat turns
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_turns_list_loads_with_one_flag(tmp_path, suffix):
    path = tmp_path / f"peer{suffix}"
    rows = peer_rows()
    if suffix == ".jsonl":
        write_jsonl(path, rows)
    else:
        datasets.Dataset.from_list(rows).to_parquet(str(path))
    with pytest.warns(PromptSetWarning):  # groups of 2 are below the default minimum of 30
        loaded = load_prompts(path, column_map="text=turns[0],id=question_id,group:category=category")
    assert [p.text for p in loaded.prompts] == [r["turns"][0] for r in rows]
    assert [p.id for p in loaded.prompts] == ["100", "101", "102", "103"]
    assert loaded.prompts[0].attributes == {"category": "reasoning"}
    with pytest.warns(PromptSetWarning):
        last = load_prompts(path, column_map="text=turns[-1],id=question_id")
    assert last.prompts[3].text == "Now shorten that, case 3."


def test_turns_without_index_names_the_fix(tmp_path):
    path = tmp_path / "peer.jsonl"
    write_jsonl(path, peer_rows())
    with pytest.raises(InputError, match=r"field 'text': is a list; pick one element with --column-map text=COLUMN\[0\]"):
        load_prompts(path, column_map="text=turns")


def test_index_past_the_end_is_a_row_error(tmp_path):
    path = tmp_path / "peer.jsonl"
    write_jsonl(path, peer_rows())
    report = validate_prompt_set(path, column_map="text=turns[2]")
    assert len(report.errors) == 4
    assert "line 1, field 'text': column 'turns' has 2 element(s), so turns[2] does not exist" in str(report.errors[0])
    with pytest.raises(InputError, match="is not a column name or COLUMN"):
        load_prompts(path, column_map="text=turns[first]")


def test_cli_stats_on_peer_set(tmp_path, capsys):
    path = tmp_path / "peer.jsonl"
    write_jsonl(path, peer_rows())
    assert main(["prompts", "stats", str(path), "--column-map", "text=turns[0],group:category=category"]) == 0
    out = capsys.readouterr().out
    assert "reasoning" in out and "writing" in out and "4 prompt(s) record no provenance" in out


CONVERSATIONS = [
    {
        "id": "chat-1",
        "messages": [
            {"role": "system", "content": "You are brief."},
            {"role": "user", "content": "Name a planet."},
            {"role": "assistant", "content": "Mars."},
            {"role": "user", "content": "Why is it red?"},
        ],
    },
    {"id": "chat-2", "messages": [{"role": "user", "content": "Say hello."}]},
]
TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}<s>assistant: {% endif %}"
)


def test_messages_go_through_the_chat_template(tmp_path):
    path = tmp_path / "chats.jsonl"
    write_jsonl(path, CONVERSATIONS)
    with pytest.warns(PromptSetWarning, match="no prompt has a group attribute"):
        loaded = load_prompts(path)
    first = loaded.prompts[0]
    assert first.messages is not None and len(first.messages) == 4 and first.messages[2] == {"role": "assistant", "content": "Mars."}
    assert first.text == "system: You are brief.\n\nuser: Name a planet.\n\nassistant: Mars.\n\nuser: Why is it red?"
    assert first.to_record()["messages"][3]["content"] == "Why is it red?"
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = TEMPLATE
    rendered = "<s>system: You are brief.\n<s>user: Name a planet.\n<s>assistant: Mars.\n<s>user: Why is it red?\n<s>assistant: "
    assert prompt_token_ids(tokenizer, first) == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    # A text prompt is one user turn; without a template the text is tokenized as it is.
    assert prompt_token_ids(tokenizer, "Hi") == tokenizer("<s>user: Hi\n<s>assistant: ", add_special_tokens=False)["input_ids"]
    assert prompt_token_ids(tokenizer, first, chat_template=False) == tokenizer(first.text)["input_ids"]


def test_messages_column_map_and_bad_conversations(tmp_path):
    path = tmp_path / "chats.jsonl"
    rows = [{"key": r["id"], "dialogue": r["messages"]} for r in CONVERSATIONS]
    rows.append({"key": "chat-3", "dialogue": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})
    write_jsonl(path, rows)
    report = validate_prompt_set(path, column_map="messages=dialogue,id=key")
    assert [(e.line, e.field, e.message) for e in report.errors] == [
        (3, "messages", "must end with a user turn: the audited model writes the next assistant turn")
    ]
    assert report.n_prompts == 2
    with pytest.raises(InputError, match="both text and messages"):
        load_prompts(path, column_map="messages=dialogue,text=key")


# ------------------------------------------------------------------ size limit
def test_a_50_mb_prompt_is_refused_in_one_sentence_naming_it(tmp_path, capsys):
    path = tmp_path / "huge.jsonl"
    rows = [{"id": "fine-1", "text": "A short request."}, {"id": "huge-7", "text": "word " * 10_000_000}]
    write_jsonl(path, rows)
    with pytest.raises(InputError) as caught:
        load_prompts(path)
    message = str(caught.value)
    assert "prompt 'huge-7' is 50,000,000 bytes, over the limit of 65,536 bytes" in message
    assert "\n" not in message and len(message) < 300 and "word word" not in message
    assert main(["prompts", "validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert "huge-7" in captured.err and len(captured.err) < 1000
    # Just under the limit is accepted.
    write_jsonl(path, [{"id": "big-1", "text": "a" * MAX_PROMPT_BYTES}])
    assert validate_prompt_set(path).errors == ()


# ------------------------------------------------------------------ near-duplicates and lengths
def test_near_duplicates_across_dimensions_warn_within_do_not(tmp_path):
    folder = make_set(tmp_path / "s")
    domain = read_jsonl(folder / "domain.jsonl")
    domain[0]["text"] = "[sae] Tell me about topic 3, please."  # a near copy of dialect-3-sae
    write_jsonl(folder / "domain.jsonl", domain)
    write_manifest(folder, 4, ["vocabulary.jsonl", "domain.jsonl", "dialect.jsonl"])
    report = validate_prompt_set(folder)
    assert report.errors == ()
    near = [w for w in report.warnings if "nearly duplicates" in w.message]
    assert len(near) == 1, [str(w) for w in report.warnings]
    # dialect renderings of one request resemble each other by design: no warning between them
    assert near[0].message.startswith("prompt 'dialect-3-sae' nearly duplicates 'domain-code-0' of domain.jsonl (word Jaccard 0.8")


def test_near_duplicate_threshold():
    texts = [
        "Explain how tides work on the coast of Maine today.",
        "Explain how tides work on the coast of Maine today!",
        "Explain how tides work on the coast of Oregon in winter.",
    ]
    found = near_duplicates(texts, ["a", "b", "c"])
    assert [(d.first, d.second) for d in found] == [(0, 1)] and found[0].similarity == 1.0
    assert near_duplicates(texts, ["a", "a", "a"]) == []


def test_group_with_long_prompts_warns(tmp_path):
    folder = make_set(tmp_path / "s")
    domain = read_jsonl(folder / "domain.jsonl")
    for row in domain:
        if row["attributes"]["domain"] == "news":
            row["text"] += " Include the background, who said what, and why it matters to readers now."
    write_jsonl(folder / "domain.jsonl", domain)
    write_manifest(folder, 4, ["vocabulary.jsonl", "domain.jsonl", "dialect.jsonl"])
    report = validate_prompt_set(folder)
    gaps = [w for w in report.warnings if "median length" in w.message]
    assert len(gaps) == 1 and "group 'news' has median length 20 words, 2.86x group 'code' (7)" in gaps[0].message
    # A dimension whose word counts are not comparable (languages) can turn the warning off.
    manifest = (folder / "manifest.yaml").read_text()
    (folder / "manifest.yaml").write_text(manifest.replace("    reference: null\n", "    reference: null\n    compare_lengths: false\n"))
    assert not [w for w in validate_prompt_set(folder).warnings if "median length" in w.message]


# ------------------------------------------------------------------ provenance and extra fields
def test_extra_fields_are_kept_and_provenance_shown(small_set, capsys):
    vocabulary = read_jsonl(small_set / "vocabulary.jsonl")
    for row in vocabulary:
        row["zipf"] = 5.0 if row["attributes"]["vocabulary"] == "common" else 2.5
        row["features"] = ["swap"]
    write_jsonl(small_set / "vocabulary.jsonl", vocabulary)
    write_manifest(small_set, 4, ["vocabulary.jsonl", "domain.jsonl", "dialect.jsonl"])
    loaded = load_prompts(small_set)
    first = loaded.prompts[0]
    assert first.metadata == {"provenance": PROVENANCE, "zipf": 5.0, "features": ["swap"]}
    table = prompt_set_stats(loaded)
    rarity = dict(zip(table["group"], table["zipf_median"]))
    assert rarity["common"] == 5.0 and rarity["rare"] == 2.5 and pd.isna(rarity["code"])
    assert main(["prompts", "stats", str(small_set)]) == 0
    out = capsys.readouterr().out
    assert "zipf_median" in out
    assert f"42 prompt(s): {PROVENANCE['author']}, 2026-12-01, {PROVENANCE['method']}" in out
    assert main(["prompts", "show", str(small_set), "--rows", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count(f"12 row(s): {PROVENANCE['author']}, 2026-12-01") == 2 and "18 row(s)" in out


def test_metadata_does_not_change_the_prompt_checksum(small_set):
    before = load_prompts(small_set).checksum
    vocabulary = read_jsonl(small_set / "vocabulary.jsonl")
    for row in vocabulary:
        row["provenance"] = {**PROVENANCE, "method": "rewritten by hand"}
    write_jsonl(small_set / "vocabulary.jsonl", vocabulary)
    write_manifest(small_set, 4, ["vocabulary.jsonl", "domain.jsonl", "dialect.jsonl"])
    assert load_prompts(small_set).checksum == before


def test_bad_and_missing_provenance(small_set):
    vocabulary = read_jsonl(small_set / "vocabulary.jsonl")
    vocabulary[1]["provenance"] = {"author": "someone"}
    del vocabulary[2]["provenance"]
    write_jsonl(small_set / "vocabulary.jsonl", vocabulary)
    write_manifest(small_set, 4, ["vocabulary.jsonl", "domain.jsonl", "dialect.jsonl"])
    report = validate_prompt_set(small_set)
    assert [(e.line, e.field) for e in report.errors if e.field == "provenance"] == [(2, "provenance")]
    missing = [w for w in report.warnings if w.field == "provenance"]
    assert len(missing) == 1 and missing[0].line == 3 and "1 row(s) of vocabulary.jsonl have no provenance" in missing[0].message


# ------------------------------------------------------------------ paired sampling
def paired_set(folder, n_technical: int = 8, n_literary: int = 8):
    """A vocabulary dimension where each rare item has its own common twin (parallel: reference)."""
    folder.mkdir()
    rows = []
    for kind, n in (("technical", n_technical), ("literary", n_literary)):
        for i in range(n):
            pair = f"v-{kind}-{i}"
            for group, word in (("common", "plain"), (f"rare_{kind}", kind)):
                rows.append(
                    {
                        "id": f"{pair}-{group}",
                        "text": f"Use the {word} word {i} in a {kind} sentence.",
                        "pair_id": pair,
                        "attributes": {"vocabulary": group},
                        "provenance": PROVENANCE,
                    }
                )
    write_jsonl(folder / "vocabulary.jsonl", rows)
    data = (folder / "vocabulary.jsonl").read_bytes()
    import hashlib

    (folder / "manifest.yaml").write_text(
        "name: paired\nversion: 1\nmin_group_size: 4\ndimensions:\n  vocabulary:\n    file: vocabulary.jsonl\n"
        "    groups: [common, rare_technical, rare_literary]\n    reference: common\n    parallel: reference\n"
        f"files:\n  vocabulary.jsonl:\n    sha256: {hashlib.sha256(data).hexdigest()}\n    rows: {len(rows)}\n",
        encoding="utf-8",
    )
    return folder


def test_reference_paired_dimension_validates_and_samples_whole_pairs(tmp_path):
    folder = paired_set(tmp_path / "paired")
    assert validate_prompt_set(folder).errors == ()
    full = load_prompts(folder)
    assert full.dimensions["vocabulary"]["pairing"] == "reference"
    assert full.manifest_entry()["dimensions"]["vocabulary"]["pairing"] == "reference"
    for seed in range(5):
        sampled = load_prompts(folder, per_group=3, seed=seed)
        groups = Counter(p.attributes["vocabulary"] for p in sampled.prompts)
        assert groups == {"common": 6, "rare_technical": 3, "rare_literary": 3}
        members = Counter(p.pair_id for p in sampled.prompts)
        assert len(members) == 6 and set(members.values()) == {2}


def test_reference_pairing_refuses_a_pair_of_two_rare_items(tmp_path):
    folder = paired_set(tmp_path / "paired")
    rows = read_jsonl(folder / "vocabulary.jsonl")
    rows[0]["attributes"]["vocabulary"] = "rare_literary"  # v-technical-0: now rare_literary + rare_technical
    write_jsonl(folder / "vocabulary.jsonl", rows)
    report = validate_prompt_set(folder)
    messages = [e.message for e in report.errors if e.field == "pair_id"]
    assert any("each pair links one 'common' prompt to one prompt of one other group" in m for m in messages), messages


def test_parallel_sampling_keeps_every_groups_version_of_each_drawn_pair(tmp_path):
    folder = make_set(tmp_path / "s", n=30, min_group_size=30)
    for seed in range(4):
        sampled = load_prompts(folder, dimensions="dialect", per_group=3, seed=seed)
        members = Counter(p.pair_id for p in sampled.prompts)
        assert len(members) == 3 and set(members.values()) == {3}


def test_manifest_parallel_value_checked(tmp_path):
    folder = paired_set(tmp_path / "paired")
    text = (folder / "manifest.yaml").read_text().replace("parallel: reference", "parallel: sometimes")
    (folder / "manifest.yaml").write_text(text)
    with pytest.raises(InputError, match="must be true, false or reference"):
        load_prompts(folder)


def test_json_rows_round_trip(tmp_path):
    # A row written with every optional field of the v2 schema loads without a warning about it.
    row = {
        "id": "v-1-common",
        "text": "Describe the sky tonight.",
        "pair_id": None,
        "attributes": {"mood": "calm"},
        "provenance": PROVENANCE,
        "features": ["none"],
        "rare_word": "firmament",
        "common_word": "sky",
        "zipf": 4.72,
    }
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.warns(PromptSetWarning, match="fewer than the set's minimum"):
        loaded = load_prompts(path)
    assert loaded.prompts[0].metadata["rare_word"] == "firmament" and loaded.prompts[0].metadata["zipf"] == 4.72
