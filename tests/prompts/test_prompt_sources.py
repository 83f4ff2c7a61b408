"""Loading other people's data: saved HF datasets, Parquet, CSV, plain JSONL, with column maps."""

from __future__ import annotations

import json
import warnings

import datasets
import pandas as pd
import pytest

from specaudit.errors import InputError
from specaudit.prompts import PromptSetWarning, load_prompts, parse_column_map, validate_prompt_set

CATEGORIES = ["math", "history", "cooking"]


def qa_dataset(n_per_category: int = 4) -> datasets.Dataset:
    """A Hub-style dataset: our fields under other names, the category as a ClassLabel."""
    rows = {"qid": [], "question": [], "category": [], "source": []}
    for c, name in enumerate(CATEGORIES):
        for i in range(n_per_category):
            rows["qid"].append(1000 + 10 * c + i)
            rows["question"].append(f"A {name} question, number {i}?")
            rows["category"].append(c)
            rows["source"].append("forum" if i % 2 else "book")
    features = datasets.Features(
        {
            "qid": datasets.Value("int64"),
            "question": datasets.Value("string"),
            "category": datasets.ClassLabel(names=CATEGORIES),
            "source": datasets.Value("string"),
        }
    )
    return datasets.Dataset.from_dict(rows, features=features)


MAP = "text=question,id=qid,group:domain=category,group:origin=source"


def check_mapped(prompt_set, n_per_category=4):
    assert len(prompt_set) == 3 * n_per_category
    first = prompt_set.prompts[0]
    assert (first.id, first.text, first.pair_id) == ("1000", "A math question, number 0?", None)
    assert first.attributes == {"domain": "math", "origin": "book"}
    assert prompt_set.dimensions["domain"] == {"groups": ["cooking", "history", "math"], "reference": None, "parallel": False}
    assert prompt_set.version is None and len(prompt_set.checksum) == 64


def test_saved_dataset_through_column_map(tmp_path):
    qa_dataset().save_to_disk(str(tmp_path / "qa"))
    with pytest.warns(PromptSetWarning, match="fewer than the set's minimum of 30"):
        prompt_set = load_prompts(tmp_path / "qa", column_map=MAP)
    check_mapped(prompt_set)
    assert prompt_set.name == "qa"


def test_saved_dataset_dict_picks_split(tmp_path):
    datasets.DatasetDict({"train": qa_dataset(4), "test": qa_dataset(2)}).save_to_disk(str(tmp_path / "qa"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PromptSetWarning)
        check_mapped(load_prompts(tmp_path / "qa", column_map=MAP, split="test"), n_per_category=2)
    with pytest.raises(InputError, match="has no split 'validation'; its splits are: train, test"):
        load_prompts(tmp_path / "qa", column_map=MAP, split="validation")


def test_parquet_through_column_map_with_dict(tmp_path):
    path = tmp_path / "qa.parquet"
    qa_dataset().to_parquet(str(path))
    mapping = {"text": "question", "id": "qid", "group:domain": "category", "group:origin": "source"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PromptSetWarning)
        prompt_set = load_prompts(path, column_map=mapping, per_group=2, seed=0, dimensions="domain")
    # Parquet keeps the ClassLabel names in its schema metadata, so categories still read as names.
    assert sorted(p.attributes["domain"] for p in prompt_set.prompts) == ["cooking"] * 2 + ["history"] * 2 + ["math"] * 2


def test_csv_with_json_attributes_and_generated_ids(tmp_path):
    frame = pd.DataFrame(
        {
            "text": [f"Prompt {i}" for i in range(6)],
            "attributes": [json.dumps({"language": "en" if i % 2 else "fr"}) for i in range(6)],
            "pair_id": [f"p{i // 2}" for i in range(6)],
        }
    )
    path = tmp_path / "prompts.csv"
    frame.to_csv(path, index=False)
    with pytest.warns(PromptSetWarning):
        prompt_set = load_prompts(path)
    assert [p.id for p in prompt_set.prompts][:2] == ["row-1", "row-2"]
    assert prompt_set.prompts[1].attributes == {"language": "en"}
    # Every pair has one 'en' and one 'fr' member: inferred as parallel.
    assert prompt_set.dimensions["language"] == {"groups": ["en", "fr"], "reference": None, "parallel": True}


def test_csv_errors_name_the_row(tmp_path):
    path = tmp_path / "bad.csv"
    pd.DataFrame({"id": ["a", "b", "a"], "text": ["x", "y", "z"]}).to_csv(path, index=False)
    (error,) = validate_prompt_set(path).errors
    assert str(error).endswith("bad.csv row 3, field 'id': duplicate id 'a' (first on row 1); ids must be unique")
    assert error.unit == "row" and error.line == 3 and error.field == "id"


def test_jsonl_without_manifest_duplicate_text_only_warns(tmp_path):
    path = tmp_path / "mine.jsonl"
    rows = [{"id": f"m{i}", "text": "same text" if i < 2 else f"text {i}", "attributes": {"domain": "code"}} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = validate_prompt_set(path)
    assert report.ok
    assert any(w.field == "text" and w.line == 2 and "duplicate text" in w.message for w in report.warnings)


def test_missing_text_column_names_the_fix(tmp_path):
    qa_dataset().save_to_disk(str(tmp_path / "qa"))
    with pytest.raises(InputError, match=r"has no 'text' column \(columns: qid, question, category, source\); map one"):
        load_prompts(tmp_path / "qa")
    with pytest.raises(InputError, match="has no column 'topic' \\(mapped to group:domain\\)"):
        load_prompts(tmp_path / "qa", column_map="text=question,group:domain=topic")


@pytest.mark.parametrize(
    "spec, words",
    [
        ("text", "has no '='"),
        ("txt=question", "field 'txt' is unknown"),
        ("group:=category", "names no dimension"),
        ("text=", "names no column"),
    ],
)
def test_column_map_errors(spec, words):
    with pytest.raises(InputError, match=words):
        parse_column_map(spec)


def test_column_map_parsing():
    parsed = parse_column_map(" text = question , id=qid, pair_id=pid, group:domain=category ")
    assert (parsed.text, parsed.id, parsed.pair_id, parsed.groups) == ("question", "qid", "pid", {"domain": "category"})


def test_column_map_rejected_for_manifest_sets(small_set):
    with pytest.raises(InputError, match="a column map does not apply"):
        load_prompts(small_set, column_map="text=question")


def test_empty_and_unsupported_files(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    (error,) = validate_prompt_set(tmp_path / "empty.jsonl").errors
    assert "is empty" in error.message
    (tmp_path / "prompts.txt").write_text("hello\n")
    with pytest.raises(InputError, match="unsupported file type '.txt'"):
        load_prompts(tmp_path / "prompts.txt")


def test_folder_of_data_files(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    pd.DataFrame({"prompt": [f"Prompt {i}" for i in range(5)], "lang": ["en", "fr", "en", "fr", "en"]}).to_csv(
        folder / "train.csv", index=False
    )
    report = validate_prompt_set(folder, column_map="text=prompt,group:language=lang")
    assert report.ok and report.n_prompts == 5
    with pytest.warns(PromptSetWarning):
        prompt_set = load_prompts(folder, column_map="text=prompt,group:language=lang")
    assert [p.attributes["language"] for p in prompt_set.prompts] == ["en", "fr", "en", "fr", "en"]
