"""Each corruption of a valid set is reported as the right error, at the right file, line and field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from prompt_factory import make_set, read_jsonl, write_jsonl, write_manifest

from specaudit.errors import InputError
from specaudit.prompts import PromptSetWarning, load_prompts, validate_prompt_set

FILES = ["vocabulary.jsonl", "domain.jsonl", "dialect.jsonl"]


def corrupt(folder: Path, file: str, edit, *, refresh_checksums: bool = True) -> None:
    """Apply `edit` to a file's rows; refresh checksums so the edit is the only problem."""
    rows = read_jsonl(folder / file)
    write_jsonl(folder / file, edit(rows))
    if refresh_checksums:
        write_manifest(folder, 4, FILES)


def test_valid_set_has_no_issues(small_set):
    report = validate_prompt_set(small_set)
    assert report.ok and report.errors == () and report.warnings == ()
    assert report.n_prompts == 12 + 12 + 18
    prompt_set = load_prompts(small_set)
    assert (prompt_set.name, prompt_set.version, len(prompt_set)) == ("small", 3, 42)
    assert prompt_set.dimensions["dialect"] == {"groups": ["sae", "aave", "scottish"], "reference": "sae", "parallel": True}


def _set_row(rows, index, **changes):
    rows[index] = {**rows[index], **changes}
    return rows


CASES = {
    # name: (file, edit, expected line (1-based) or None, field, words in the message)
    "duplicate id": ("domain.jsonl", lambda r: _set_row(r, 4, id=r[1]["id"]), 5, "id", ["duplicate id 'domain-code-1'", "line 2"]),
    "empty text": ("domain.jsonl", lambda r: _set_row(r, 3, text="   "), 4, "text", ["is empty"]),
    "duplicate text": ("domain.jsonl", lambda r: _set_row(r, 2, text=r[0]["text"]), 3, "text", ["duplicate text", "line 1"]),
    "missing attribute": ("dialect.jsonl", lambda r: _set_row(r, 7, attributes={}), 8, "attributes.dialect", ["is missing"]),
    "unknown group": (
        "domain.jsonl",
        lambda r: _set_row(r, 0, attributes={"domain": "cooking"}),
        1,
        "attributes.domain",
        ["unknown group 'cooking'", "declared: code, news"],
    ),
    "missing id": ("vocabulary.jsonl", lambda r: _set_row(r, 5, id=None), 6, "id", ["is missing"]),
    "missing pair_id": (
        "dialect.jsonl",
        lambda r: _set_row(r, 4, pair_id=None),
        5,
        "pair_id",
        ["is missing", "parallel dimension 'dialect'"],
    ),
    # Drop the 'aave' member (row 5) of pair dialect-1: the pair's first row is reported.
    "broken pair": ("dialect.jsonl", lambda r: r[:4] + r[5:], 4, "pair_id", ["pair 'dialect-1' has no member for group(s) aave"]),
    "pair member twice": (
        "vocabulary.jsonl",
        lambda r: _set_row(r, 3, attributes={"vocabulary": "common"}),
        4,
        "pair_id",
        ["pair 'vocab-1' already has a 'common' member", "line 3"],
    ),
    "non-string group": (
        "domain.jsonl",
        lambda r: _set_row(r, 1, attributes={"domain": 7}),
        2,
        "attributes.domain",
        ["must be a non-empty string"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_corruption_is_named(small_set, case):
    file, edit, line, field, words = CASES[case]
    corrupt(small_set, file, edit)
    report = validate_prompt_set(small_set)
    matching = [e for e in report.errors if e.file.endswith(file) and e.field == field and e.line == line]
    assert matching, f"expected an error at {file} line {line} field {field}; got: {[str(e) for e in report.errors]}"
    for word in words:
        assert word in matching[0].message
    # load_prompts refuses the set with one sentence naming file, line and field.
    with pytest.raises(InputError) as caught:
        load_prompts(small_set)
    message = str(caught.value)
    assert file in message and f"line {line}" in message and f"field '{field}'" in message


def test_line_numbers_count_blank_lines(small_set):
    # datasets skips blank lines; the reported line must still be the physical line in the file.
    rows = read_jsonl(small_set / "domain.jsonl")
    rows[2]["text"] = ""
    text = "".join(json.dumps(r) + "\n" for r in rows[:2]) + "\n\n" + "".join(json.dumps(r) + "\n" for r in rows[2:])
    (small_set / "domain.jsonl").write_text(text, encoding="utf-8")
    write_manifest(small_set, 4, FILES)
    (error,) = validate_prompt_set(small_set).errors
    assert (error.line, error.field) == (5, "text")


def test_torn_json_line(small_set):
    path = small_set / "dialect.jsonl"
    path.write_text(path.read_text(encoding="utf-8") + '{"id": "dialect-9-sae", "text": "Tell me ab\n', encoding="utf-8")
    write_manifest(small_set, 4, FILES)
    report = validate_prompt_set(small_set)
    torn = [e for e in report.errors if e.file.endswith("dialect.jsonl")]
    assert len(torn) == 1 and torn[0].line == 19 and "not valid JSON" in torn[0].message
    with pytest.raises(InputError, match=r"dialect\.jsonl line 19: is not valid JSON"):
        load_prompts(small_set)


def test_row_that_is_not_an_object(small_set):
    path = small_set / "domain.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines.insert(3, '["a", "list"]')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_manifest(small_set, 4, FILES)
    (error,) = validate_prompt_set(small_set).errors
    assert error.line == 4 and "not an object" in error.message


def test_bad_checksum(small_set):
    corrupt(small_set, "domain.jsonl", lambda r: _set_row(r, 0, text="Write a short code item, edited."), refresh_checksums=False)
    (error,) = validate_prompt_set(small_set).errors
    assert error.file.endswith("manifest.yaml") and error.field == "files.domain.jsonl.sha256"
    assert "checksum mismatch" in error.message and "specaudit prompts checksum small --write" in error.message
    with pytest.raises(InputError, match="checksum mismatch"):
        load_prompts(small_set)


def test_row_count_mismatch_with_refreshed_sha(small_set):
    # Someone pasted a new sha256 by hand but left the row count: still caught.
    corrupt(small_set, "domain.jsonl", lambda r: r + [{**r[0], "id": "domain-extra", "text": "An extra prompt."}])
    manifest = (small_set / "manifest.yaml").read_text()
    (small_set / "manifest.yaml").write_text(manifest.replace("rows: 13", "rows: 12"))
    (error,) = validate_prompt_set(small_set).errors
    assert error.field == "files.domain.jsonl.rows" and "13 rows" in error.message


def test_group_below_minimum_is_an_error(tmp_path):
    folder = make_set(tmp_path / "s", n=6, min_group_size=7)
    errors = validate_prompt_set(folder).errors
    assert len(errors) == 2 + 2 + 3  # every group has 6 < 7
    assert all("fewer than the set's minimum of 7" in e.message for e in errors)
    assert {e.field for e in errors} == {"attributes.vocabulary", "attributes.domain", "attributes.dialect"}


def test_undeclared_attribute_and_stray_file_warn(small_set):
    corrupt(small_set, "domain.jsonl", lambda r: _set_row(r, 0, attributes={"domain": "code", "mood": "happy"}))
    shutil.copy(small_set / "domain.jsonl", small_set / "old_domain.jsonl")
    report = validate_prompt_set(small_set)
    assert report.ok
    assert any(w.field == "attributes.mood" and w.line == 1 for w in report.warnings)
    assert any("old_domain.jsonl" in w.message for w in report.warnings)
    with pytest.warns(PromptSetWarning, match="'mood' is not a dimension declared"):
        prompt_set = load_prompts(small_set)
    prompt = next(p for p in prompt_set.prompts if p.id == "domain-code-0")
    assert prompt.attributes == {"domain": "code"}  # the undeclared attribute is dropped


def test_missing_data_file(small_set):
    (small_set / "dialect.jsonl").unlink()
    (error,) = validate_prompt_set(small_set).errors
    assert error.field == "dimensions.dialect.file" and "does not exist" in error.message


@pytest.mark.parametrize(
    "manifest_text, field",
    [
        ("name: x\nversion: one\ndimensions: {}\n", "version"),
        ("name: x\nversion: 1\ndimensions:\n  d: {file: d.jsonl, groups: [a, b], reference: c}\n", "dimensions.d.reference"),
        ("name: x\nversion: 1\ndimensions:\n  d: {file: d.jsonl, groups: [a, a]}\n", "dimensions.d.groups"),
        ("name: x\nversion: 1\ndimensions:\n  d: {file: d.jsonl, groups: [a]}\nfiles:\n  d.jsonl: {sha256: abc}\n", "files.d.jsonl.sha256"),
    ],
)
def test_malformed_manifest(tmp_path, manifest_text, field):
    (tmp_path / "manifest.yaml").write_text(manifest_text)
    with pytest.raises(InputError, match=rf"manifest\.yaml, field '{field}'"):
        validate_prompt_set(tmp_path)


def test_unknown_source_is_a_clear_error():
    with pytest.raises(InputError, match="no prompt set, file or dataset named 'no-such-set'"):
        load_prompts("no-such-set")
    with pytest.raises(InputError, match="does not exist"):
        load_prompts("missing/file.jsonl")
