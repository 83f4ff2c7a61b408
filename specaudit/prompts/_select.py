"""Choosing which prompts a run uses: dimensions, intersections, stratified sampling."""

from __future__ import annotations

import itertools
import warnings
import zlib
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from specaudit.errors import InputError
from specaudit.prompts._model import Prompt, PromptSetWarning

INTERSECTION = "×"


def _names(value: str | Sequence[str] | None, what: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        parts = value.replace(INTERSECTION, ",").split(",")
    else:
        parts = list(value)
    names = [str(p).strip() for p in parts if str(p).strip()]
    if not names:
        raise InputError(f"{what} is empty; name at least one dimension.")
    return list(dict.fromkeys(names))


def select_dimensions(
    prompts: list[Prompt], dimensions: dict[str, dict[str, Any]], wanted: str | Sequence[str] | None, source: str
) -> tuple[list[Prompt], dict[str, dict[str, Any]]]:
    """Keep prompts labelled in any wanted dimension, and only the wanted attributes on them."""
    names = _names(wanted, "dimensions")
    if names is None:
        return prompts, dimensions
    unknown = [n for n in names if n not in dimensions]
    if unknown:
        known = ", ".join(dimensions) or "none"
        raise InputError(f"prompt set {source} has no dimension {', '.join(repr(u) for u in unknown)}; its dimensions are: {known}.")
    keep = set(names)
    selected = []
    for prompt in prompts:
        attributes = {d: g for d, g in prompt.attributes.items() if d in keep}
        if attributes:
            selected.append(replace(prompt, attributes=attributes))
    return selected, {d: dimensions[d] for d in names}


def add_intersection(
    prompts: list[Prompt], dimensions: dict[str, dict[str, Any]], intersect: str | Sequence[str] | None, source: str
) -> tuple[list[Prompt], dict[str, dict[str, Any]], str | None]:
    """Add the attribute "a×b" (value "ga×gb") to prompts labelled in every intersected dimension."""
    names = _names(intersect, "intersect")
    if names is None:
        return prompts, dimensions, None
    if len(names) < 2:
        raise InputError(f"intersect needs at least two dimensions, got {names[0]!r}; e.g. intersect=['domain', 'dialect'].")
    unknown = [n for n in names if n not in dimensions]
    if unknown:
        raise InputError(
            f"cannot intersect {', '.join(repr(u) for u in unknown)}: not a dimension of {source} (dimensions: {', '.join(dimensions)})."
        )
    key = INTERSECTION.join(names)
    out = []
    seen: set[str] = set()
    for prompt in prompts:
        if all(n in prompt.attributes for n in names):
            value = INTERSECTION.join(prompt.attributes[n] for n in names)
            seen.add(value)
            prompt = replace(prompt, attributes={**prompt.attributes, key: value})
        out.append(prompt)
    if not seen:
        raise InputError(
            f"no prompt of {source} is labelled in all of {', '.join(names)}, so '{key}' would be empty; "
            "intersections need prompts that carry every intersected attribute."
        )
    combos = [INTERSECTION.join(c) for c in itertools.product(*(dimensions[n]["groups"] for n in names))]
    refs = [dimensions[n]["reference"] for n in names]
    dimensions = {
        **dimensions,
        key: {
            "groups": [c for c in combos if c in seen],
            "reference": INTERSECTION.join(refs) if all(r is not None for r in refs) and INTERSECTION.join(refs) in seen else None,
            "parallel": False,
        },
    }
    return out, dimensions, key


def stratified_sample(
    prompts: list[Prompt],
    strata: Sequence[str],
    per_group: int,
    seed: int,
    dimensions: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Prompt]:
    """Up to `per_group` prompts from every group of every stratum dimension, seeded.

    Prompts sharing a pair_id are drawn as one unit, so a parallel pair is taken whole or not at
    all: for a parallel dimension this picks `per_group` pair ids and keeps every group's version
    of each. In a dimension paired with its reference (`"pairing": "reference"` in `dimensions`),
    `per_group` counts the other groups and the reference group keeps the twin of every drawn pair.
    A unit is taken only if no group it touches would exceed its quota, which keeps groups
    balanced even when pairs are incomplete. The original order of prompts is preserved.

    `seed` is the sampling seed: keep it fixed (0) across runs that decode with different seeds,
    so that they audit the same prompts.
    """
    if isinstance(per_group, bool) or not isinstance(per_group, (int, np.integer)) or per_group < 1:
        raise InputError(f"per_group must be a positive integer, got {per_group!r}.")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}.")
    chosen: set[str] = set()
    for dim in strata:
        units: dict[str, list[Prompt]] = defaultdict(list)
        for prompt in prompts:
            if dim in prompt.attributes:
                key = f"pair:{prompt.pair_id}" if prompt.pair_id is not None else f"one:{prompt.id}"
                units[key].append(prompt)
        keys = sorted(units)  # independent of file order, so a reordered file samples the same prompts
        # Seed per dimension (crc32 is stable across processes, unlike hash()).
        rng = np.random.default_rng([int(seed), zlib.crc32(dim.encode("utf-8"))])
        groups = {p.attributes[dim] for members in units.values() for p in members}
        spec = (dimensions or {}).get(dim, {})
        quota = dict.fromkeys(groups, per_group)
        twin_group = spec.get("reference") if spec.get("pairing") == "reference" else None
        if twin_group in quota:
            quota[twin_group] = per_group * (len(groups) - 1)
        counts: Counter[str] = Counter()
        for index in rng.permutation(len(keys)):
            need = Counter(p.attributes[dim] for p in units[keys[index]])
            if all(counts[g] + n <= quota[g] for g, n in need.items()):
                counts.update(need)
                chosen.update(p.id for p in units[keys[index]])
                if all(counts[g] >= quota[g] for g in groups):
                    break
        short = sorted(g for g in groups if counts[g] < quota[g])
        if short:
            warnings.warn(
                f"dimension '{dim}': group(s) {', '.join(short)} have fewer than per_group={per_group} prompts "
                "available, so they keep all they have",
                PromptSetWarning,
                stacklevel=3,
            )
    return [p for p in prompts if p.id in chosen]
