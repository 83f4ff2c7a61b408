"""The shipped `core` set: valid, every group at least 30 prompts, parallel structure intact."""

from __future__ import annotations

from collections import Counter

from specaudit.prompts import find_prompt_set, load_prompts, prompt_set_stats, validate_prompt_set

GROUPS = {
    "vocabulary": ["common", "rare"],
    "domain": ["code", "medical", "legal", "finance", "science", "conversation", "creative", "news"],
    "dialect": ["sae", "aave", "indian", "naija", "scottish", "singlish", "jamaican", "appalachian"],
    "language": ["en", "es", "fr", "de", "zh", "ja", "hi", "ar", "sw", "yo"],
}


def test_core_validates_without_errors():
    report = validate_prompt_set("core")
    assert report.errors == (), "\n".join(str(e) for e in report.errors[:20])


def test_core_groups_have_at_least_30_prompts():
    manifest = find_prompt_set("core")
    assert manifest is not None and manifest.min_group_size == 30
    assert {d: list(s.groups) for d, s in manifest.dimensions.items()} == GROUPS
    table = prompt_set_stats(load_prompts("core"))
    assert len(table) == sum(len(g) for g in GROUPS.values())
    small = table[table["prompts"] < 30]
    assert small.empty, small[["dimension", "group", "prompts"]].to_string()


def test_core_parallel_dimensions_are_complete_and_ids_unique():
    core = load_prompts("core")
    assert len({p.id for p in core.prompts}) == len(core.prompts)
    for dim in ("vocabulary", "dialect", "language"):
        members = [p for p in core.prompts if dim in p.attributes]
        by_pair = Counter(p.pair_id for p in members)
        assert set(by_pair.values()) == {len(GROUPS[dim])}, f"{dim}: a pair lacks a member"
        assert core.dimensions[dim]["parallel"] is True
