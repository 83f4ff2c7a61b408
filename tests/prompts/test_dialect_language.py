"""The dialect and language files of `core` (v2): parallel, complete, tagged, faithful in length.

These tests read the JSONL files directly so that they check the data whatever the manifest
declares; the manifest's group lists must match DIALECT_GROUPS and LANGUAGE_GROUPS below.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "prompt_sets" / "core"
MIN_GROUP_SIZE = 60

DIALECT_GROUPS = ["sae", "aave", "indian", "naija", "scottish", "singlish", "jamaican", "appalachian", "irish", "south_african"]
LANGUAGE_GROUPS = ["en", "es", "fr", "de", "zh", "ja", "hi", "ar", "sw", "yo", "ru", "ko", "hinglish"]

# A dialect rendering keeps the request and adds only a few features, so its length in
# characters stays within these bounds of the SAE version's (typed-form spellings such as
# Jamaican "mi", "di" shorten; Indian and Scottish periphrasis lengthens).
DIALECT_LENGTH_RATIO = (0.75, 1.25)

# Script each language must be written in (a translation left in English would fail).
SCRIPTS = {
    "zh": r"[\u4e00-\u9fff]",
    "ja": r"[\u3040-\u30ff]",
    "hi": r"[\u0900-\u097f]",
    "ar": r"[\u0600-\u06ff]",
    "ru": r"[\u0400-\u04ff]",
    "ko": r"[\uac00-\ud7af]",
}
NOT_LATIN = re.compile(r"[\u0400-\u04ff\u0600-\u06ff\u0900-\u097f\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]")
POLITENESS = re.compile(r"\b(please|kindly)\b", re.IGNORECASE)


def _rows(name: str) -> list[dict]:
    with open(CORE / name, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@pytest.fixture(scope="module")
def dialect_rows() -> list[dict]:
    return _rows("dialect.jsonl")


@pytest.fixture(scope="module")
def language_rows() -> list[dict]:
    return _rows("language.jsonl")


def _by_pair(rows: list[dict], dim: str) -> dict[str, dict[str, dict]]:
    pairs: dict[str, dict[str, dict]] = defaultdict(dict)
    for row in rows:
        pairs[row["pair_id"]][row["attributes"][dim]] = row
    return pairs


def _check_structure(rows: list[dict], dim: str, groups: list[str], prefix: str) -> None:
    for row in rows:
        assert set(row) >= {"id", "text", "pair_id", "attributes", "features", "provenance"}, row["id"]
        assert isinstance(row["text"], str) and row["text"].strip() == row["text"] and row["text"], row["id"]
        assert re.fullmatch(rf"{prefix}-\d{{3}}", row["pair_id"]), row["id"]
        assert row["attributes"] == {dim: row["attributes"][dim]} and row["attributes"][dim] in groups, row["id"]
        assert row["id"] == f"{row['pair_id']}-{row['attributes'][dim]}", row["id"]
        assert isinstance(row["features"], list) and all(isinstance(f, str) and f for f in row["features"]), row["id"]
        prov = row["provenance"]
        assert prov.get("author") and re.fullmatch(r"\d{4}-\d{2}-\d{2}", prov.get("date", "")) and prov.get("method"), row["id"]
    ids = Counter(row["id"] for row in rows)
    assert ids.most_common(1)[0][1] == 1, f"duplicate ids: {[i for i, n in ids.items() if n > 1][:5]}"
    texts = Counter(row["text"] for row in rows)
    assert texts.most_common(1)[0][1] == 1, f"duplicate texts: {[t for t, n in texts.items() if n > 1][:3]}"
    sizes = Counter(row["attributes"][dim] for row in rows)
    assert set(sizes) == set(groups), f"{dim}: groups {sorted(sizes)} differ from {groups}"
    small = {g: n for g, n in sizes.items() if n < MIN_GROUP_SIZE}
    assert not small, f"{dim}: groups under {MIN_GROUP_SIZE}: {small}"
    incomplete = {p: sorted(set(groups) - set(m)) for p, m in _by_pair(rows, dim).items() if set(m) != set(groups)}
    assert not incomplete, f"{dim}: pairs missing members: {dict(list(incomplete.items())[:5])}"


def test_dialect_structure_groups_and_complete_pairs(dialect_rows):
    _check_structure(dialect_rows, "dialect", DIALECT_GROUPS, "dialect")


def test_language_structure_groups_and_complete_pairs(language_rows):
    _check_structure(language_rows, "language", LANGUAGE_GROUPS, "lang")


def test_every_dialect_rendering_names_its_features_and_the_reference_none(dialect_rows):
    for row in dialect_rows:
        if row["attributes"]["dialect"] == "sae":
            assert row["features"] == [], row["id"]
        else:
            assert row["features"], f"{row['id']} names no dialect feature"
            assert len(set(row["features"])) == len(row["features"]), f"{row['id']} repeats a feature"


def test_dialect_renderings_stay_close_to_the_reference_length(dialect_rows):
    low, high = DIALECT_LENGTH_RATIO
    outside = []
    for members in _by_pair(dialect_rows, "dialect").values():
        ref = len(members["sae"]["text"])
        for row in members.values():
            ratio = len(row["text"]) / ref
            if not low <= ratio <= high:
                outside.append((row["id"], round(ratio, 2)))
    assert not outside, f"length ratio to sae outside {DIALECT_LENGTH_RATIO}: {outside}"


def test_no_politeness_marker_is_added_as_a_dialect_feature(dialect_rows):
    added = [
        row["id"]
        for members in _by_pair(dialect_rows, "dialect").values()
        for row in members.values()
        if POLITENESS.search(row["text"]) and not POLITENESS.search(members["sae"]["text"])
    ]
    assert not added, f"'please'/'kindly' added where the sae request has none: {added}"


def test_singlish_uses_its_discourse_particles(dialect_rows):
    particle = re.compile(r"\b(lah|leh|lor|meh|hor|ah)[?.!]?", re.IGNORECASE)
    singlish = [row for row in dialect_rows if row["attributes"]["dialect"] == "singlish"]
    with_particle = [row for row in singlish if particle.search(row["text"])]
    assert len(with_particle) >= len(singlish) // 2
    assert len({m.group(1).lower() for row in singlish for m in particle.finditer(row["text"])}) >= 5


def test_translations_are_in_their_script_and_the_code_mixed_group_in_latin(language_rows):
    for row in language_rows:
        lang = row["attributes"]["language"]
        if lang in SCRIPTS:
            assert re.search(SCRIPTS[lang], row["text"]), f"{row['id']} is not written in its script"
        else:
            assert not NOT_LATIN.search(row["text"]), f"{row['id']} mixes in a non-Latin script"


def test_translations_keep_every_number_and_add_no_bracketed_gloss(language_rows):
    # A number the English writes in digits (a sentence count, a quantity) is written in
    # digits in every language, so a length request reads the same everywhere (a number the
    # English spells out may be a digit where that is the language's norm, e.g. ja 3つ); a
    # parenthesis that the English lacks would be an added gloss.
    for members in _by_pair(language_rows, "language").values():
        english = members["en"]["text"]
        numbers = set(re.findall(r"\d+", english))
        for row in members.values():
            missing = numbers - set(re.findall(r"\d+", row["text"]))
            assert not missing, f"{row['id']} lacks the number(s) {sorted(missing)} that the en request states"
            if "(" not in english:
                assert not re.search(r"[(（]", row["text"]), f"{row['id']} adds a bracketed gloss"


def test_dialect_and_language_requests_are_not_near_duplicates(dialect_rows, language_rows):
    def words(text: str) -> set[str]:
        return set(re.findall(r"[a-z']+", text.lower()))

    sae = [(row["id"], words(row["text"])) for row in dialect_rows if row["attributes"]["dialect"] == "sae"]
    english = [(row["id"], words(row["text"])) for row in language_rows if row["attributes"]["language"] == "en"]
    close = [(a, b) for a, wa in sae for b, wb in english if len(wa & wb) / len(wa | wb) > 0.4]
    assert not close, f"near-duplicate requests across dimensions: {close[:5]}"
