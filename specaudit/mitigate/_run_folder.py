"""The audited run folder `specaudit mitigate` starts from: its records, snapshot and prompts, the
dimension whose groups weight the training mix, and the train / held-out split by pair."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specaudit.errors import InputError

if TYPE_CHECKING:
    from typing import Any

    from transformers import PreTrainedTokenizerBase


@dataclass
class Prompt:
    id: str
    ids: list[int]
    pair: str
    attributes: dict
    text: str | None = None


# ---------------------------------------------------------------- the run folder
def read_run(run_dir: Path) -> tuple[dict, list[dict], dict]:
    from specaudit.contracts.snapshot import SNAPSHOT_FILE, load_snapshot
    from specaudit.execution.records import RECORDS_FILE, read_manifest, read_records

    manifest = read_manifest(run_dir)
    records = [r for r in read_records(run_dir / RECORDS_FILE) if not r.get("timing_only")]
    if not records:
        raise InputError(f"{run_dir / RECORDS_FILE} has no records: mitigation needs the audited prompts; run `specaudit run` first")
    path = run_dir / SNAPSHOT_FILE
    if not path.is_file():
        raise InputError(f"{run_dir} has no {SNAPSHOT_FILE}: mitigation needs the audit's groups; run `specaudit analyze {run_dir}` first")
    snapshot = load_snapshot(path)  # the contract's reader: a damaged snapshot is one sentence naming it
    if not any((section or {}).get("by_group") for section in (snapshot.get("groups") or {}).values()):
        raise InputError(
            f"{path} has no per-group acceptance (the run needs prompts with group attributes and both the vanilla and a "
            "speculative engine)"
        )
    return manifest, records, snapshot


def group_alphas(snapshot: dict, dimension: str, metric: str = "per_position_acceptance") -> dict[str, float]:
    """The audit's per-position acceptance of each group of one dimension (or another of its metrics)."""
    by_group = snapshot["groups"][dimension]["by_group"]
    return {group: (entry["metrics"].get(metric) or {}).get("value") for group, entry in by_group.items()}


def choose_dimension(snapshot: dict, requested: str | None) -> tuple[str, str]:
    """(dimension, its lowest-acceptance group): the requested dimension, else the one whose
    lowest group is furthest below its reference (or its best group)."""
    sections = {d: s for d, s in snapshot["groups"].items() if s.get("by_group")}
    if requested is not None and requested not in sections:
        raise InputError(f"--dimension {requested!r}: the audit has groups for {', '.join(sections)} only")
    gaps = {}
    for dimension in [requested] if requested else sections:
        alphas = {g: a for g, a in group_alphas(snapshot, dimension).items() if a is not None}
        if len(alphas) < 2:  # records with acceptance totals only (vLLM's n-gram steps): ranked by acceptance rate
            alphas = {g: a for g, a in group_alphas(snapshot, dimension, "acceptance_rate").items() if a is not None}
        if len(alphas) < 2:
            continue
        reference = sections[dimension].get("reference")
        anchor = alphas.get(reference) or max(alphas.values())
        worst = min(alphas, key=alphas.get)
        gaps[dimension] = (alphas[worst] / anchor if anchor else 1.0, worst)
    if not gaps:
        raise InputError("the audit has no dimension with two or more groups of measured acceptance; mitigation needs a group to compare")
    dimension = min(gaps, key=lambda d: gaps[d][0])
    return dimension, gaps[dimension][1]


def prompts_from_run(records: list[dict]) -> dict[str, Prompt]:
    prompts: dict[str, Prompt] = {}
    for record in records:
        if record["prompt_id"] not in prompts:
            prompts[record["prompt_id"]] = Prompt(
                record["prompt_id"],
                list(record["prompt_token_ids"]),
                record.get("pair_id") or record["prompt_id"],
                dict(record.get("attributes") or {}),
            )
    return prompts


def attach_texts(
    prompts: dict[str, Prompt], config: dict, tokenizer: PreTrainedTokenizerBase, per_group: int | None
) -> tuple[dict[str, Prompt], str | None]:
    """The prompt texts (needed to re-run the real engine), from the run's prompt set; with
    `per_group`, a fresh stratified sample of that set replaces the run's prompts. Returns the
    prompts and, when the set cannot be read, why."""
    from specaudit.prompts import load_prompts, prompt_token_ids

    try:
        prompt_set = load_prompts(
            config.get("prompts", "core"),
            column_map=config.get("column_map"),
            dimensions=config.get("dimensions"),
            per_group=per_group,
            seed=int(config.get("seed", 0)),
        )
    except InputError as err:
        if per_group:
            raise
        return prompts, f"the run's prompt set could not be read ({err})"
    by_id = {p.id: p for p in prompt_set.prompts}
    if per_group:
        chat = config.get("chat_template", True)
        return {
            p.id: Prompt(p.id, prompt_token_ids(tokenizer, p, chat), p.pair_id or p.id, dict(p.attributes), p.text)
            for p in prompt_set.prompts
        }, None
    for prompt in prompts.values():
        if prompt.id in by_id:
            prompt.text = by_id[prompt.id].text
    return prompts, None


def split_by_pair(prompts: dict[str, Prompt], held_out: float, seed: int, dimensions: list[str]) -> tuple[list[str], list[str]]:
    """(training ids, held-out ids): whole pairs go to one side; every group of `dimensions` gets
    at least one pair on each side where it has two, else InputError naming the group."""
    if not 0 < held_out < 1:
        raise InputError(f"--held-out must be a fraction in (0, 1), got {held_out}")
    pairs: dict[str, list[str]] = {}
    for prompt in prompts.values():
        pairs.setdefault(prompt.pair, []).append(prompt.id)
    keys = sorted(pairs)
    random.Random(seed).shuffle(keys)

    def groups_of(key: str | None) -> set[tuple[str, Any]]:
        return {(d, prompts[p].attributes.get(d)) for p in pairs[key] for d in dimensions if prompts[p].attributes.get(d) is not None}

    side: dict[str, str] = {}
    covered = {"held": set(), "train": set()}
    for key in keys:  # first make sure every group is on both sides where it can be
        groups = groups_of(key)
        if groups - covered["held"]:
            side[key] = "held"
        elif groups - covered["train"]:
            side[key] = "train"
        else:
            continue
        covered[side[key]] |= groups
    target = round(held_out * len(prompts))
    held_count = sum(len(pairs[k]) for k in side if side[k] == "held")
    for key in keys:
        if key not in side:
            side[key] = "held" if held_count < target else "train"
            held_count += len(pairs[key]) if side[key] == "held" else 0
    held = [p for k in keys if side[k] == "held" for p in pairs[k]]
    train = [p for k in keys if side[k] == "train" for p in pairs[k]]
    all_groups = {g for k in keys for g in groups_of(k)}
    for name, ids in (("training", train), ("held-out", held)):
        present = {(d, prompts[p].attributes.get(d)) for p in ids for d in dimensions}
        for dimension, group in sorted(all_groups - present):
            raise InputError(
                f"the train/held-out split leaves group {dimension}={group} without {name} prompts (it has too few "
                "prompt pairs); audit more prompts per group"
            )
    return sorted(train), sorted(held)
