"""Stratified sampling, dimension selection and intersections."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from prompt_factory import make_set, write_manifest

from specaudit.errors import InputError
from specaudit.prompts import Prompt, PromptSetWarning, load_prompts
from specaudit.prompts._select import stratified_sample


@pytest.fixture
def bigger_set(tmp_path):
    return make_set(tmp_path / "big", n=20, min_group_size=20)


def counts(prompt_set, dim):
    return Counter(p.attributes[dim] for p in prompt_set.prompts if dim in p.attributes)


def test_balanced_per_group_and_pairs_whole(bigger_set):
    sampled = load_prompts(bigger_set, per_group=5, seed=3)
    assert counts(sampled, "vocabulary") == {"common": 5, "rare": 5}
    assert counts(sampled, "domain") == {"code": 5, "news": 5}
    assert counts(sampled, "dialect") == {"sae": 5, "aave": 5, "scottish": 5}
    # Parallel dimensions: every chosen pair keeps all its members.
    for dim, size in (("vocabulary", 2), ("dialect", 3)):
        members = Counter(p.pair_id for p in sampled.prompts if dim in p.attributes)
        assert len(members) == 5 and set(members.values()) == {size}


def test_reproducible_and_seed_dependent(bigger_set):
    first = load_prompts(bigger_set, per_group=5, seed=11)
    again = load_prompts(bigger_set, per_group=5, seed=11)
    other = load_prompts(bigger_set, per_group=5, seed=12)
    assert [p.id for p in first.prompts] == [p.id for p in again.prompts]
    assert first.checksum == again.checksum
    assert {p.id for p in first.prompts} != {p.id for p in other.prompts}
    assert first.checksum != other.checksum


def test_sample_ignores_file_order(tmp_path):
    # The same rows in another order give the same sample: a re-sorted file keeps its seeds' meaning.
    original = make_set(tmp_path / "orig", n=20, min_group_size=20)
    reordered = make_set(tmp_path / "reordered", n=20, min_group_size=20)
    path = reordered / "domain.jsonl"
    path.write_text("\n".join(reversed(path.read_text().splitlines())) + "\n")
    write_manifest(reordered, 20, ["vocabulary.jsonl", "domain.jsonl", "dialect.jsonl"])
    a = {p.id for p in load_prompts(original, dimensions="domain", per_group=4, seed=5).prompts}
    b = {p.id for p in load_prompts(reordered, dimensions="domain", per_group=4, seed=5).prompts}
    assert a == b and len(a) == 8


def test_sampling_spreads_over_all_prompts(bigger_set):
    # Over many seeds every pair gets drawn: the sample is not stuck on a prefix of the file.
    prompts = load_prompts(bigger_set, dimensions="dialect").prompts
    seen = Counter()
    for seed in range(40):
        seen.update(p.pair_id for p in stratified_sample(prompts, ["dialect"], per_group=5, seed=seed) if p.attributes["dialect"] == "sae")
    assert len(seen) == 20
    # 40 draws of 5 out of 20 pairs: each pair expected 10 times; a fair sampler stays well within 2..22.
    assert min(seen.values()) >= 2 and max(seen.values()) <= 22


def test_dimension_selection(bigger_set):
    chosen = load_prompts(bigger_set, dimensions=["dialect", "vocabulary"])
    assert list(chosen.dimensions) == ["dialect", "vocabulary"]
    assert len(chosen) == 20 * 3 + 20 * 2
    assert all(set(p.attributes) <= {"dialect", "vocabulary"} for p in chosen.prompts)
    assert load_prompts(bigger_set, dimensions="domain").prompts[0].attributes == {"domain": "code"}
    with pytest.raises(InputError, match="has no dimension 'language'"):
        load_prompts(bigger_set, dimensions="language")


def test_per_group_larger_than_a_group_warns_and_keeps_all(bigger_set):
    with pytest.warns(PromptSetWarning, match="fewer than per_group=25"):
        sampled = load_prompts(bigger_set, dimensions="domain", per_group=25)
    assert counts(sampled, "domain") == {"code": 20, "news": 20}


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_per_group_must_be_positive_integer(bigger_set, bad):
    with pytest.raises(InputError, match="per_group must be a positive integer"):
        load_prompts(bigger_set, per_group=bad)


def _crossed_file(tmp_path):
    """Prompts labelled in two dimensions at once, with an uneven number per cell."""
    rows = []
    for domain, n_cells in (("code", 9), ("news", 4)):
        for dialect in ("sae", "aave"):
            for i in range(n_cells):
                rows.append(
                    {
                        "id": f"{domain}-{dialect}-{i}",
                        "text": f"{domain} {dialect} {i}",
                        "pair_id": None,
                        "attributes": {"domain": domain, "dialect": dialect},
                    }
                )
    path = tmp_path / "crossed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_intersection_attribute_and_cell_balance(tmp_path):
    path = _crossed_file(tmp_path)
    with pytest.warns(PromptSetWarning):  # groups below 30 in a file without a manifest
        crossed = load_prompts(path, intersect=["domain", "dialect"], per_group=3, seed=0)
    key = "domain×dialect"
    assert crossed.dimensions[key]["groups"] == ["code×aave", "code×sae", "news×aave", "news×sae"]
    assert counts(crossed, key) == {"code×sae": 3, "code×aave": 3, "news×sae": 3, "news×aave": 3}
    assert all(p.attributes[key] == f"{p.attributes['domain']}×{p.attributes['dialect']}" for p in crossed.prompts)


def test_intersection_needs_prompts_labelled_in_both(small_set):
    with pytest.raises(InputError, match="no prompt of .* is labelled in all of domain, dialect"):
        load_prompts(small_set, intersect="domain,dialect")
    with pytest.raises(InputError, match="at least two dimensions"):
        load_prompts(small_set, intersect=["domain"])


def test_prompt_set_records_and_manifest_entry(small_set):
    prompt_set = load_prompts(small_set, dimensions="dialect", per_group=2, seed=0)
    records = prompt_set.to_records()
    assert len(records) == 6 and set(records[0]) == {"id", "text", "pair_id", "attributes"}
    assert Prompt(**{**records[0]}) == prompt_set.prompts[0]
    entry = prompt_set.manifest_entry()
    assert entry["name"] == "small" and entry["version"] == 3 and entry["n_prompts"] == 6
    assert entry["checksum"] == prompt_set.checksum and len(entry["checksum"]) == 64
    assert entry["dimensions"] == {"dialect": {"groups": ["sae", "aave", "scottish"], "reference": "sae", "parallel": True}}
