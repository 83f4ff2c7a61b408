"""Counts per group and prompt lengths, to check a set before spending compute on it."""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from specaudit.prompts._checks import count_words
from specaudit.prompts._model import Prompt, PromptSet, PromptSetWarning

STATS_COLUMNS = [
    "dimension",
    "group",
    "reference",
    "prompts",
    "pairs",
    "unit",
    "length_min",
    "length_median",
    "length_max",
    "zipf_median",
    "below_min_size",
]


def resolve_tokenizer(spec: Any) -> Any:
    """A tokenizer from a CLI-style spec: "none" counts words, "default" the embedded model's, else a path/id."""
    if spec is None or (isinstance(spec, str) and spec.lower() == "none"):
        return None
    if not isinstance(spec, str):
        return spec  # already a tokenizer
    try:
        from specaudit.models import load_tokenizer
    except ImportError:
        warnings.warn("specaudit.models.load_tokenizer is unavailable; counting words instead of tokens", PromptSetWarning, stacklevel=2)
        return None
    return load_tokenizer(spec)


def _lengths(texts: list[str], tokenizer: Any) -> tuple[list[int], str]:
    if tokenizer is None:
        return [count_words(t) for t in texts], "words"
    if not texts:
        return [], "tokens"
    # The prompt's own tokens, without BOS/EOS or a chat template: what varies between groups.
    if callable(tokenizer):
        ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    else:
        ids = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    return [len(i) for i in ids], "tokens"


def prompt_set_stats(prompt_set: PromptSet, tokenizer: Any = None) -> pd.DataFrame:
    """One row per (dimension, group): prompt and pair counts, length min/median/max.

    Lengths are in tokens of `tokenizer` (any Hugging Face tokenizer), or in words when it is
    None (whitespace-separated, each CJK character one word; column `unit` says which).
    `zipf_median`: median word frequency (wordfreq's Zipf scale, recorded per row as `zipf`) of
    the word that distinguishes each prompt, where rows record one (the vocabulary dimension),
    else None. `below_min_size` flags groups under the set's minimum group size.
    """
    texts = [p.text for p in prompt_set.prompts]
    lengths, unit = _lengths(texts, tokenizer)
    length_of = {p.id: n for p, n in zip(prompt_set.prompts, lengths)}
    minimum = prompt_set.min_group_size
    rows = []
    for dim, spec in prompt_set.dimensions.items():
        for group, members in prompt_set.groups(dim).items():
            values = np.array([length_of[p.id] for p in members], dtype=float)
            rows.append(
                {
                    "dimension": dim,
                    "group": group,
                    "reference": group == spec.get("reference"),
                    "prompts": len(members),
                    "pairs": len({p.pair_id for p in members if p.pair_id is not None}),
                    "unit": unit,
                    "length_min": int(values.min()) if len(values) else None,
                    "length_median": float(np.median(values)) if len(values) else None,
                    "length_max": int(values.max()) if len(values) else None,
                    "zipf_median": _median_zipf(members),
                    "below_min_size": minimum is not None and len(members) < minimum,
                }
            )
    table = pd.DataFrame(rows, columns=STATS_COLUMNS)
    # Who wrote the prompts, when and how: shown under the table by format_stats.
    table.attrs["provenance"] = provenance_counts([p.metadata.get("provenance") for p in prompt_set.prompts])
    return table


def _median_zipf(members: list[Prompt]) -> float | None:
    values = [p.metadata["zipf"] for p in members if isinstance(p.metadata.get("zipf"), (int, float))]
    return round(float(np.median(values)), 2) if values else None


def provenance_counts(records: list[Any]) -> list[tuple[str, str, str, int]]:
    """(author, date, method, count) per distinct provenance record, most common first.

    `records` are the rows' `provenance` values; one that is not a record counts as "(none)".
    """
    counts: Counter[tuple[str, str, str]] = Counter()
    for record in records:
        if isinstance(record, dict):
            counts[(str(record.get("author")), str(record.get("date")), str(record.get("method")))] += 1
        else:
            counts[("(none)", "(none)", "(none)")] += 1
    return [(*key, n) for key, n in counts.most_common()]
