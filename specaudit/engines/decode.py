"""Decoding one plan item in this process: the model pair, its prompts as token ids, one record.

Shared by the local and Ray executors (and by the endpoint and vLLM executors for prompt
encoding and records), so that every executor's records look alike.
"""

from __future__ import annotations

import os
import platform
from typing import TYPE_CHECKING

import torch

from specaudit.contracts.run import CONTROL_ENGINE, PlanItem, Record
from specaudit.decoding import (
    hf_assisted_generate,
    speculative_generate,
    vanilla_generate,
)
from specaudit.decoding.stops import apply_stops
from specaudit.engines.beyond_chains import engine_k
from specaudit.errors import InputError
from specaudit.execution.plan import derive_seed

if TYPE_CHECKING:
    from specaudit.config import RunConfig
    from specaudit.decoding import Generation
    from specaudit.decoding.verify import VerifyFn
    from specaudit.models import ModelPair


def eos_token_ids(pair: ModelPair) -> set[int]:
    ids: set[int] = set()
    configured = getattr(getattr(pair.target, "generation_config", None), "eos_token_id", None)
    for value in configured if isinstance(configured, list) else [configured]:
        if value is not None:
            ids.add(int(value))
    if pair.tokenizer.eos_token_id is not None:
        ids.add(int(pair.tokenizer.eos_token_id))
    return ids


def pad_token_id(pair: ModelPair, eos_ids: set[int] | None = None) -> int:
    """The id that pads batched rows: the tokenizer's pad token, else the smallest end-of-sequence
    id (padding is masked out, so any id the model knows will do)."""
    if pair.tokenizer.pad_token_id is not None:
        return int(pair.tokenizer.pad_token_id)
    ids = eos_token_ids(pair) if eos_ids is None else eos_ids
    return min(ids) if ids else 0


def library_versions() -> dict:
    from importlib import metadata

    from specaudit.engines.provenance import source_commit

    versions = {"python": platform.python_version()}
    for package in ("specaudit", "torch", "transformers", "datasets", "scipy", "numpy", "pandas"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    versions["specaudit_commit"] = source_commit()
    return versions


def device_entry(pair: ModelPair) -> dict:
    device = pair.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    if device.type == "cuda":
        return {"type": device.type, "name": name, "threads": torch.get_num_threads()}
    from specaudit.engines.provenance import cpu_model

    return {"type": device.type, "name": name, "cpu_model": cpu_model(), "cores": os.cpu_count(), "threads": torch.get_num_threads()}


def load_pair_for(cfg: RunConfig) -> ModelPair | None:
    """The models a config needs: no draft when only vanilla runs.

    On CPU torch gets `cfg.threads` threads (default 1): batch-1 decoding of small models is
    bound by per-operation overhead, and OpenMP threads that wait on each other under any
    competing load slowed the int8 draft's decoding about 30-fold here (measured on 2 cores).
    """
    from specaudit.contracts.engines import LOCAL_ENGINES
    from specaudit.models import load_pair

    if any(e not in LOCAL_ENGINES for e in cfg.engines):
        return None  # a backend decodes elsewhere and loads what it needs itself
    torch.set_num_threads(cfg.threads)
    needs_draft = any(e != CONTROL_ENGINE for e in cfg.engines)
    return load_pair(cfg.target, cfg.draft if needs_draft else None, device=cfg.device, dtype=cfg.dtype)


def generate_one(
    engine: str,
    pair: ModelPair,
    prompt_ids: list[int],
    cfg: RunConfig,
    seed: int,
    verify: VerifyFn | None,
    eos_ids: set[int],
    max_new_tokens: int,
    attributes: dict | None = None,
) -> Generation:
    """Decode one prompt with one engine; the single place that dispatches on the engine name."""
    if engine == "hf-assisted":
        return hf_assisted_generate(
            pair.target,
            pair.draft,
            prompt_ids,
            spec=cfg.sampling,
            k=cfg.k,
            max_new_tokens=max_new_tokens,
            seed=seed,
            eos_ids=eos_ids,
            pad_id=pair.tokenizer.pad_token_id,
        )
    generator = torch.Generator(device=pair.device).manual_seed(seed)
    common = dict(spec=cfg.sampling, max_new_tokens=max_new_tokens, generator=generator, eos_ids=eos_ids, vocab_size=pair.vocab_size)
    if engine == CONTROL_ENGINE:
        return vanilla_generate(pair.target, prompt_ids, **common)
    if engine in ("tree", "staged"):
        from specaudit.engines.beyond_chains import generate_staged, generate_tree

        return (generate_tree if engine == "tree" else generate_staged)(pair, prompt_ids, cfg, **common)
    draft = pair.draft
    if cfg.plant_disparity:
        from specaudit.models import DisparityPlant, PlantedDraft

        plant = DisparityPlant.parse(cfg.plant_disparity)
        if plant.applies_to(attributes):
            if not pair.draft_is_model:
                raise InputError(f"--plant-disparity needs a model draft, not {cfg.draft!r}")
            draft = PlantedDraft(draft, plant, pair.vocab_size)
    return speculative_generate(pair.target, draft, prompt_ids, k=cfg.k, verify=verify, **common)


def make_record(cfg: RunConfig, item: PlanItem, seed: int, prompt_ids: list[int], generation: Generation, text: str) -> Record:
    """One records.jsonl entry: the plan item's identity, then everything its engine measured.
    Shared by every executor, so that their records look alike."""
    prompt = item.prompt
    payload = generation.to_dict()
    payload["output_token_ids"] = payload.pop("tokens")
    return Record(
        key=item.key,
        prompt_id=prompt.id,
        pair_id=prompt.pair_id,
        attributes=dict(prompt.attributes),
        engine=item.engine,
        sample=item.sample,
        seed=seed,
        timing_only=item.timing_only,
        sampling=cfg.sampling.to_dict(),
        k=0 if item.engine == CONTROL_ENGINE else engine_k(item.engine, cfg),
        prompt_token_ids=prompt_ids,
        text=text,
        **payload,
    )


def decode_item(
    pair: ModelPair, cfg: RunConfig, item: PlanItem, prompt_ids: list[int], verify: VerifyFn | None, eos_ids: set[int]
) -> Record:
    """Decode one plan item into its record; the seed depends only on the run seed, prompt id and
    sample, so any process may decode any item."""
    seed = derive_seed(cfg.seed, item.prompt.id, item.sample)
    generation = generate_one(item.engine, pair, prompt_ids, cfg, seed, verify, eos_ids, cfg.max_new_tokens, item.prompt.attributes)
    decode = lambda ids: pair.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    text = apply_stops(generation, decode(generation.tokens), decode, cfg.sampling.stop)
    return make_record(cfg, item, seed, prompt_ids, generation, text)


def warm_up(pair: ModelPair, cfg: RunConfig, prompt_ids: list[int], verify: VerifyFn | None, eos_ids: set[int]) -> None:
    """First calls pay for allocation and kernel selection: run them before anything is timed."""
    for _ in range(cfg.warmup):
        for engine in cfg.engines:
            generate_one(engine, pair, prompt_ids, cfg, cfg.seed, verify, eos_ids, min(8, cfg.max_new_tokens))
