"""The shipped `core` set, read against its own manifest: valid, big enough, pairs intact, and
vocabulary pairs that are true minimal pairs with measured rarity.

Group lists and counts come from manifest.yaml, so the dimensions rewritten on other branches
(task, domain, dialect, language) are checked by the same rules without hard-coded numbers.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from wordfreq import zipf_frequency

from specaudit.prompts import (
    find_prompt_set,
    load_prompts,
    prompt_set_stats,
    validate_prompt_set,
)
from specaudit.prompts._checks import word_edit_distance

MINIMUM = 60
OWN_FILES = ("vocabulary.jsonl", "register.jsonl")  # the files this test holds to a clean validation
RARE_GROUPS = ("rare_technical", "rare_literary")


@pytest.fixture(scope="module")
def manifest():
    found = find_prompt_set("core")
    assert found is not None
    return found


@pytest.fixture(scope="module")
def core():
    return load_prompts("core")


def test_manifest_is_version_2_with_minimum_60(manifest):
    assert manifest.version == 2 and manifest.min_group_size == MINIMUM
    assert list(manifest.dimensions["vocabulary"].groups) == ["common", *RARE_GROUPS]
    assert manifest.dimensions["vocabulary"].pairing == "reference"
    assert list(manifest.dimensions["register"].groups) == ["plain", "elevated"]


def test_core_validates_without_errors(manifest):
    report = validate_prompt_set("core")
    assert report.errors == (), "\n".join(str(e) for e in report.errors[:20])
    # Warnings that concern vocabulary or register (their rows, or a near-duplicate of them).
    own = [
        w
        for w in report.warnings
        if any(name in str(w) for name in OWN_FILES)
        or re.search(r"dimension '(vocabulary|register)'|attributes\.(vocabulary|register)", str(w))
    ]
    assert own == [], "\n".join(str(w) for w in own)


def test_every_group_reaches_its_minimum(manifest, core):
    table = prompt_set_stats(core)
    for dim, spec in manifest.dimensions.items():
        least = spec.min_group_size or manifest.min_group_size
        rows = table[table["dimension"] == dim]
        assert list(rows["group"]) == list(spec.groups)
        small = rows[rows["prompts"] < least]
        assert small.empty, f"{dim}: " + small[["group", "prompts"]].to_string()
    for dim in ("vocabulary", "register"):  # no lowered minimum for the v2 dimensions
        assert manifest.dimensions[dim].min_group_size is None
        assert (table[table["dimension"] == dim]["prompts"] >= MINIMUM).all()


def test_pairs_are_complete_and_ids_unique(manifest, core):
    assert len({p.id for p in core.prompts}) == len(core.prompts)
    for dim, spec in manifest.dimensions.items():
        if not spec.parallel:
            continue
        members: dict[str, list[str]] = defaultdict(list)
        for prompt in core.prompts:
            if dim in prompt.attributes:
                members[prompt.pair_id].append(prompt.attributes[dim])
        for pair_id, groups in members.items():
            if spec.pairing == "reference":
                assert len(groups) == 2 and groups.count(spec.reference) == 1, (dim, pair_id, groups)
            else:
                assert sorted(groups) == sorted(spec.groups), (dim, pair_id, groups)


def vocabulary_pairs(core) -> dict[str, dict[str, object]]:
    pairs: dict[str, dict[str, object]] = defaultdict(dict)
    for prompt in core.prompts:
        if "vocabulary" in prompt.attributes:
            pairs[prompt.pair_id][prompt.attributes["vocabulary"]] = prompt
    return pairs


def test_vocabulary_pairs_are_minimal_pairs(core):
    pairs = vocabulary_pairs(core)
    per_rare_group = Counter(next(g for g in members if g != "common") for members in pairs.values())
    assert all(per_rare_group[g] >= MINIMUM for g in RARE_GROUPS), per_rare_group
    for pair_id, members in pairs.items():
        common = members["common"]
        rare = next(p for g, p in members.items() if g != "common")
        common_word, rare_word = common.metadata["common_word"], common.metadata["rare_word"]
        assert (rare.metadata["common_word"], rare.metadata["rare_word"]) == (common_word, rare_word), pair_id
        # Same sentence, one term swapped: the rare text with the term put back is the common text.
        assert common_word in common.text and rare_word in rare.text, pair_id
        assert rare.text.replace(rare_word, common_word, 1) == common.text, pair_id
        assert word_edit_distance(common.text, rare.text) <= 2, pair_id


def content_term(term: str) -> str:
    return re.sub(r"^(the|a|an) ", "", term, flags=re.IGNORECASE)


def test_rarity_is_measured_and_separates_the_groups(core):
    pairs = vocabulary_pairs(core)
    zipf_by_group: dict[str, list[float]] = defaultdict(list)
    for pair_id, members in pairs.items():
        for group, prompt in members.items():
            term = prompt.metadata["common_word" if group == "common" else "rare_word"]
            measured = zipf_frequency(content_term(term), "en")
            assert prompt.metadata["zipf"] == pytest.approx(measured, abs=0.006), (prompt.id, term, measured)
            zipf_by_group[group].append(prompt.metadata["zipf"])
        rare = next(p for g, p in members.items() if g != "common")
        # The datasheet's rule: common >= 3.5, rare in (0, 3.0], at least one Zipf unit apart.
        assert members["common"].metadata["zipf"] >= 3.5 and 0 < rare.metadata["zipf"] <= 3.0, pair_id
        assert members["common"].metadata["zipf"] - rare.metadata["zipf"] >= 1.0, pair_id
    medians = {g: float(np.median(v)) for g, v in zipf_by_group.items()}
    print("median Zipf per vocabulary group:", medians)
    assert medians["common"] > 4.0 and all(medians[g] < 2.6 for g in RARE_GROUPS)
    table = prompt_set_stats(core)
    shown = dict(zip(table[table["dimension"] == "vocabulary"]["group"], table[table["dimension"] == "vocabulary"]["zipf_median"]))
    assert shown == pytest.approx({g: round(m, 2) for g, m in medians.items()})


def test_datasheet_rarity_table_matches_the_data(core):
    text = (Path(__file__).resolve().parents[2] / "prompt_sets" / "core" / "DATASHEET.md").read_text(encoding="utf-8")
    table = prompt_set_stats(core)
    for _, row in table[table["dimension"] == "vocabulary"].iterrows():
        assert f"| {row['group']} | {row['prompts']} | {row['zipf_median']:.2f} |" in text, row["group"]
