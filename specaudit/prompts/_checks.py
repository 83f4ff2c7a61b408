"""Checks on a set's content as a whole: near-duplicates across dimensions, length balance, size.

These find what a per-row check cannot: the same request filed under two dimensions (its result
would count twice, under two labels), and groups whose prompts differ in length (length moves
acceptance rates by itself, so a length gap confounds the group comparison).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# One prompt above this is refused before anything else reads it: a run's prompts are requests,
# not documents, and a torn or concatenated file must not reach a tokenizer.
MAX_PROMPT_BYTES = 64 * 1024
NEAR_DUPLICATE_JACCARD = 0.8
SHINGLE_WORDS = 1  # word sets: order-free, so a reordered copy is still found
MAX_LENGTH_RATIO = 1.5

# Chinese and Japanese put no spaces between words; counting each Han/kana character as a word
# keeps word counts comparable across languages (the usual word-count convention for CJK).
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_WORD = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")
_PUNCTUATION = re.compile(r"[^\w]+")


def words(text: str) -> list[str]:
    """Whitespace-separated words, each CJK character one word."""
    return _WORD.findall(text)


def count_words(text: str) -> int:
    return len(words(text))


def normalized_words(text: str) -> list[str]:
    """Lower-cased words without punctuation: what near-duplicate detection compares."""
    out = []
    for word in words(text.lower()):
        stripped = _PUNCTUATION.sub("", word)
        if stripped:
            out.append(stripped)
    return out


def shingles(text: str, size: int = SHINGLE_WORDS) -> frozenset[tuple[str, ...]]:
    tokens = normalized_words(text)
    if len(tokens) < size:
        return frozenset([tuple(tokens)]) if tokens else frozenset()
    return frozenset(tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


@dataclass(frozen=True)
class NearDuplicate:
    first: int  # indices into the items given to near_duplicates
    second: int
    similarity: float


def near_duplicates(texts: Sequence[str], labels: Sequence[str], threshold: float = NEAR_DUPLICATE_JACCARD) -> list[NearDuplicate]:
    """Pairs of texts with different labels whose word-shingle Jaccard similarity is >= threshold.

    Prefix filtering keeps this near-linear: two sets with Jaccard >= t share at least one of the
    first |A| - ceil(t|A|) + 1 shingles of each, in a global order (rarest first), so only pairs
    that share such a shingle are compared exactly.
    """
    sets = [shingles(t) for t in texts]
    frequency = Counter(s for shingle_set in sets for s in shingle_set)
    index: dict[tuple[str, ...], list[int]] = defaultdict(list)
    candidates: set[tuple[int, int]] = set()
    for i, shingle_set in enumerate(sets):
        if not shingle_set:
            continue
        ordered = sorted(shingle_set, key=lambda s: (frequency[s], s))
        prefix = ordered[: len(ordered) - math.ceil(threshold * len(ordered)) + 1]
        for shingle in prefix:
            for j in index[shingle]:
                if labels[j] != labels[i]:
                    candidates.add((j, i))
            index[shingle].append(i)
    found = []
    for i, j in sorted(candidates):
        similarity = jaccard(sets[i], sets[j])
        if similarity >= threshold:
            found.append(NearDuplicate(i, j, similarity))
    return found


@dataclass(frozen=True)
class LengthGap:
    group: str
    median: float
    shortest_group: str
    shortest_median: float

    @property
    def ratio(self) -> float:
        return self.median / self.shortest_median


def length_gaps(lengths_by_group: dict[str, list[int]], max_ratio: float = MAX_LENGTH_RATIO) -> list[LengthGap]:
    """Groups whose median length is more than max_ratio times the shortest group's median."""
    medians = {g: float(np.median(v)) for g, v in lengths_by_group.items() if v}
    if len(medians) < 2:
        return []
    shortest = min(medians, key=medians.__getitem__)
    base = medians[shortest]
    if base <= 0:
        return []
    return [LengthGap(g, m, shortest, base) for g, m in medians.items() if g != shortest and m > max_ratio * base]


def word_edit_distance(first: str, second: str) -> int:
    """Levenshtein distance counted in words (insert, delete or replace one word costs 1).

    A minimal pair that swaps one single-word term is at distance 1; a two-word term for a
    one- or two-word term, at most 2.
    """
    a, b = words(first), words(second)
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        diagonal, row[0] = row[0], i
        for j in range(1, len(b) + 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1]))
    return row[len(b)]
