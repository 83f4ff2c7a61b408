"""The `task` and `domain` files of the core set: size, schema, length matching and near-duplicates.

These read the JSONL directly (not through the manifest), so they hold whether or not the manifest
lists the `task` dimension yet. The bounds are the ones the datasheet states for these dimensions.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from itertools import combinations
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "prompt_sets" / "core"

TASK_GROUPS = ["summarisation", "rag_qa", "translation", "closed_qa", "maths", "code_editing", "open_writing"]
COPY_BEARING = ["summarisation", "rag_qa", "translation", "code_editing"]
NO_PASSAGE = ["closed_qa", "maths", "open_writing"]
DOMAIN_GROUPS = ["code", "medical", "legal", "finance", "science", "conversation", "creative", "news"]
DOMAIN_TASK_MIX = {"explain": 16, "summarisation": 8, "rag_qa": 8, "advice": 16, "open_writing": 16}
MIN_PER_GROUP = 60
PROVENANCE_KEYS = {"author", "date", "method"}
NEAR_DUPLICATE_JACCARD = 0.8


def _rows(name: str) -> list[dict]:
    with open(CORE / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _median_length(rows: list[dict], dim: str, group: str) -> float:
    return statistics.median(len(r["text"]) for r in rows if r["attributes"][dim] == group)


def _max_ratio(medians: list[float]) -> float:
    return max(medians) / min(medians)


def _shingles(text: str, n: int = 3) -> frozenset[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    if len(words) < n:
        return frozenset([tuple(words)])
    return frozenset(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def _near_duplicates(texts: dict[str, str]) -> list[tuple[str, str, float]]:
    sh = {k: _shingles(t) for k, t in texts.items()}
    found = []
    for a, b in combinations(sh, 2):
        inter = len(sh[a] & sh[b])
        if inter == 0:
            continue
        jaccard = inter / len(sh[a] | sh[b])
        if jaccard >= NEAR_DUPLICATE_JACCARD:
            found.append((a, b, round(jaccard, 2)))
    return found


TASK = _rows("task.jsonl")
DOMAIN = _rows("domain.jsonl")


@pytest.mark.parametrize(("rows", "dim", "groups"), [(TASK, "task", TASK_GROUPS), (DOMAIN, "domain", DOMAIN_GROUPS)])
def test_every_group_is_present_and_large_enough(rows, dim, groups):
    counts = Counter(r["attributes"][dim] for r in rows)
    assert set(counts) == set(groups)
    small = {g: n for g, n in counts.items() if n < MIN_PER_GROUP}
    assert not small, f"{dim}: groups under {MIN_PER_GROUP}: {small}"


@pytest.mark.parametrize(("rows", "dim"), [(TASK, "task"), (DOMAIN, "domain")])
def test_rows_follow_the_schema(rows, dim):
    for r in rows:
        where = r.get("id")
        assert isinstance(r["id"], str) and re.fullmatch(rf"{dim}-[a-z_]+-\d{{3}}", r["id"]), where
        assert r["id"].split("-")[1] == r["attributes"][dim], where
        assert isinstance(r["text"], str) and r["text"].strip(), where
        assert r["pair_id"] is None, where
        assert set(r["attributes"]) == {dim}, f"{where}: attributes must hold only the dimension"
        assert isinstance(r["task_type"], str) and r["task_type"], where
        assert set(r["provenance"]) == PROVENANCE_KEYS and all(r["provenance"].values()), where


def test_ids_and_texts_are_unique_across_both_files():
    ids = [r["id"] for r in TASK + DOMAIN]
    assert len(ids) == len(set(ids))
    texts = [" ".join(r["text"].split()) for r in TASK + DOMAIN]
    assert len(texts) == len(set(texts))


def test_task_rows_carry_their_task_as_task_type():
    assert all(r["task_type"] == r["attributes"]["task"] for r in TASK)


def test_task_lengths_are_matched_within_bands():
    for band, bound in ((COPY_BEARING, 1.3), (NO_PASSAGE, 1.3)):
        medians = [_median_length(TASK, "task", g) for g in band]
        assert _max_ratio(medians) <= bound, dict(zip(band, medians))
    # the bands really differ: a passage-bearing prompt is several times longer than a bare question
    assert min(_median_length(TASK, "task", g) for g in COPY_BEARING) > 2 * max(_median_length(TASK, "task", g) for g in NO_PASSAGE)


def test_every_domain_has_the_same_task_mix():
    for group in DOMAIN_GROUPS:
        mix = Counter(r["task_type"] for r in DOMAIN if r["attributes"]["domain"] == group)
        assert mix == DOMAIN_TASK_MIX, f"{group}: {dict(mix)}"


def test_domain_lengths_are_matched():
    medians = [_median_length(DOMAIN, "domain", g) for g in DOMAIN_GROUPS]
    assert _max_ratio(medians) <= 1.25, dict(zip(DOMAIN_GROUPS, medians))
    # and within each task type, so that length is not confounded with domain inside a type either
    for task_type in DOMAIN_TASK_MIX:
        per_domain = [
            statistics.median(len(r["text"]) for r in DOMAIN if r["attributes"]["domain"] == g and r["task_type"] == task_type)
            for g in DOMAIN_GROUPS
        ]
        assert _max_ratio(per_domain) <= 1.25, (task_type, dict(zip(DOMAIN_GROUPS, per_domain)))


def test_no_near_duplicates_within_or_across_the_core_files():
    texts = {r["id"]: r["text"] for r in TASK + DOMAIN}
    mine = set(texts)
    for other in sorted(CORE.glob("*.jsonl")):
        if other.name not in ("task.jsonl", "domain.jsonl"):
            texts.update({r["id"]: r["text"] for r in _rows(other.name)})
    # pairs among the other files are their owners' concern; report only pairs that involve these two files
    found = [(a, b, j) for a, b, j in _near_duplicates(texts) if a in mine or b in mine]
    assert not found, found[:20]


def test_near_duplicate_check_catches_a_reworded_copy():
    base = "Summarise this notice in one sentence: the pool reopens on Monday with longer hours and new lanes."
    assert _near_duplicates({"a": base, "b": base.replace("Monday", "Tuesday")}) == []
    assert _near_duplicates({"a": base, "b": base + " Thanks!"})
