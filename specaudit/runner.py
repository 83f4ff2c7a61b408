"""Plan → records.jsonl: every prompt × sample × engine, interleaved, resumable.

Engines of one prompt and sample run back to back, in alternating order (vanilla first on even
samples, last on odd ones), after a warm-up, so that slow drift of the machine affects both
sides of each paired speed-up alike. `--timing-repeats R` adds R more interleaved runs per
prompt marked `timing_only`: latency statistics use them, output statistics ignore them.
"""

from __future__ import annotations

import hashlib
import platform
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from specaudit.config import RunConfig
from specaudit.decoding import hf_assisted_generate, speculative_generate, vanilla_generate
from specaudit.errors import InputError
from specaudit.preflight import check_draft_noise_targets, check_prompt_lengths
from specaudit.records import (
    MANIFEST_FILE,
    RECORDS_FILE,
    SCHEMA_VERSION,
    RecordWriter,
    read_manifest,
    read_records,
    record_key,
    write_json_atomic,
)


@dataclass(frozen=True)
class RunSummary:
    out_dir: Path
    records: int  # records in the file after this run
    written: int  # records this invocation added
    skipped: int  # records already present (resumed)
    seconds: float


def derive_seed(run_seed: int, prompt_id: str, sample: int | str) -> int:
    """A per-(prompt, sample) seed that does not depend on the order or subset of the plan."""
    digest = hashlib.sha256(f"{run_seed}|{prompt_id}|{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def encode_prompt(tokenizer, text: str, chat_template: bool = True) -> list[int]:
    """Token ids of a user turn: through the tokenizer's chat template when it has one."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        encoded = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
        ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        return list(ids)
    return list(tokenizer(text)["input_ids"])


def eos_token_ids(pair) -> set[int]:
    ids: set[int] = set()
    configured = getattr(getattr(pair.target, "generation_config", None), "eos_token_id", None)
    for value in configured if isinstance(configured, list) else [configured]:
        if value is not None:
            ids.add(int(value))
    if pair.tokenizer.eos_token_id is not None:
        ids.add(int(pair.tokenizer.eos_token_id))
    return ids


def library_versions() -> dict:
    import importlib.metadata as metadata

    versions = {"python": platform.python_version()}
    for package in ("specaudit", "torch", "transformers", "datasets", "scipy", "numpy", "pandas"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def generate_one(engine: str, pair, prompt_ids: list[int], cfg: RunConfig, seed: int, verify, eos_ids: set[int], max_new_tokens: int,
                 attributes: dict | None = None):
    """Decode one prompt with one engine; the single place that dispatches on the engine name."""
    if engine == "hf-assisted":
        return hf_assisted_generate(
            pair.target, pair.draft, prompt_ids, spec=cfg.sampling, k=cfg.k, max_new_tokens=max_new_tokens,
            seed=seed, eos_ids=eos_ids, pad_id=pair.tokenizer.pad_token_id,
        )
    generator = torch.Generator(device=pair.device).manual_seed(seed)
    common = dict(spec=cfg.sampling, max_new_tokens=max_new_tokens, generator=generator, eos_ids=eos_ids, vocab_size=pair.vocab_size)
    if engine == "vanilla":
        return vanilla_generate(pair.target, prompt_ids, **common)
    draft = pair.draft
    if cfg.draft_noise:
        from specaudit.models import NoisyDraft, parse_draft_noise

        dimension, group, sigma = parse_draft_noise(cfg.draft_noise)
        if (attributes or {}).get(dimension) == group:
            if not pair.draft_is_model:
                raise InputError(f"--draft-noise needs a model draft, not {cfg.draft!r}")
            draft = NoisyDraft(draft, sigma, seed)
    return speculative_generate(pair.target, draft, prompt_ids, k=cfg.k, verify=verify, **common)


def _plan(prompts, cfg: RunConfig, engines: tuple[str, ...] | None = None):
    """(prompt, engine, sample label, timing_only) in execution order; `engines` defaults to cfg's
    (a backend passes the record engines it produces, e.g. ("vanilla", "speculative"))."""
    engines = tuple(engines or cfg.engines)
    for prompt in prompts:
        labels = [(s, False) for s in range(cfg.samples)] + [(f"t{r}", True) for r in range(cfg.timing_repeats)]
        for position, (label, timing_only) in enumerate(labels):
            order = engines if position % 2 == 0 else tuple(reversed(engines))
            for engine in order:
                yield prompt, engine, label, timing_only


def _check_resumable(out_dir: Path, previous: dict, current: dict) -> None:
    """A run folder resumes only with the settings that made its records."""
    for section in ("decoding", "prompt_set_checksum", "shard"):
        old, new = previous.get(section), current.get(section)
        if old != new:
            if isinstance(old, dict) and isinstance(new, dict):
                detail = "; ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k))
            else:
                detail = f"{section}: {old!r} -> {new!r}"
            raise InputError(f"{out_dir} holds a run with other settings ({detail}); resume with the same settings or choose a new --out")


def load_pair_for(cfg: RunConfig):
    """The models a config needs: no draft when only vanilla runs.

    On CPU torch gets `cfg.threads` threads (default 1): batch-1 decoding of small models is
    bound by per-operation overhead, and OpenMP threads that wait on each other under any
    competing load slowed the int8 draft's decoding about 30-fold here (measured on 2 cores).
    """
    from specaudit.backends import BACKENDS
    from specaudit.models import load_pair

    if any(e in BACKENDS for e in cfg.engines):
        return None  # a backend decodes elsewhere and loads what it needs itself
    torch.set_num_threads(cfg.threads)
    needs_draft = any(e != "vanilla" for e in cfg.engines)
    return load_pair(cfg.target, cfg.draft if needs_draft else None, device=cfg.device, dtype=cfg.dtype)


def device_entry(pair) -> dict:
    device = pair.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    return {"type": device.type, "name": name, "threads": torch.get_num_threads()}


def run_manifest(cfg: RunConfig, identity: dict, prompt_set, *, previous: dict, command: str | None, models: dict, device: dict,
                 versions: dict) -> dict:
    """manifest.json of a run folder; every executor writes the same fields (plus its own extras)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "created": previous.get("created") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": previous.get("command") or command or " ".join(sys.argv),
        "invocations": previous.get("invocations", 0) + 1,
        "config": cfg.to_dict(),
        **identity,
        "models": models,
        "versions": versions,
        "device": device,
        "seeds": {"run": cfg.seed, "derivation": "sha256(run_seed|prompt_id|sample)[:8], little-endian, 63 bits"},
        "prompt_set": prompt_set.manifest_entry(),
    }


def plan_record(cfg: RunConfig, prompt, engine: str, label: int | str, timing_only: bool, seed: int, prompt_ids: list[int],
                generation, text: str) -> dict:
    """One records.jsonl entry: the plan item's identity, then everything its engine measured.
    Shared by every executor and backend, so that their records look alike."""
    record = {
        "key": record_key(prompt.id, engine, label),
        "prompt_id": prompt.id,
        "pair_id": prompt.pair_id,
        "attributes": dict(prompt.attributes),
        "engine": engine,
        "sample": label,
        "seed": seed,
        "timing_only": timing_only,
        "sampling": cfg.sampling.to_dict(),
        "k": 0 if engine == "vanilla" else cfg.k,
        "prompt_token_ids": prompt_ids,
        "output_token_ids": generation.tokens,
        "text": text,
    }
    payload = generation.to_dict()
    payload.pop("tokens")
    record.update(payload)
    return record


def decode_item(pair, cfg: RunConfig, item, prompt_ids: list[int], verify, eos_ids: set[int]) -> dict:
    """Decode one plan item (prompt, engine, sample label, timing_only) into its record; the seed
    depends only on the run seed, prompt id and sample, so any process may decode any item."""
    prompt, engine, label, timing_only = item
    seed = derive_seed(cfg.seed, prompt.id, label)
    generation = generate_one(engine, pair, prompt_ids, cfg, seed, verify, eos_ids, cfg.max_new_tokens, prompt.attributes)
    text = pair.tokenizer.decode(generation.tokens, skip_special_tokens=True)
    return plan_record(cfg, prompt, engine, label, timing_only, seed, prompt_ids, generation, text)


def warm_up(pair, cfg: RunConfig, prompt_ids: list[int], verify, eos_ids: set[int]) -> None:
    """First calls pay for allocation and kernel selection: run them before anything is timed."""
    for _ in range(cfg.warmup):
        for engine in cfg.engines:
            generate_one(engine, pair, prompt_ids, cfg, cfg.seed, verify, eos_ids, min(8, cfg.max_new_tokens))


def prepare_run(cfg: RunConfig, out_dir: Path, prompt_set=None, shard: tuple[int, int] | None = None) -> tuple:
    """(prompt set, identity, previous manifest or {}): the prompts are loaded first, so bad input
    fails before any model loads or server is called, and a folder made with other settings is
    refused before anything is written."""
    from specaudit.prompts import load_prompts

    if prompt_set is None:
        prompt_set = load_prompts(cfg.prompts, column_map=cfg.column_map, dimensions=cfg.dimensions, per_group=cfg.per_group, seed=cfg.seed)
    if not prompt_set.prompts:
        raise InputError(f"prompt set {cfg.prompts!r} selected no prompts (check --dimensions / --per-group)")
    check_draft_noise_targets(cfg.draft_noise, prompt_set)
    identity = {"decoding": cfg.decoding_identity(), "prompt_set_checksum": prompt_set.checksum, "shard": list(shard) if shard else None}
    previous = read_manifest(out_dir) if (Path(out_dir) / MANIFEST_FILE).is_file() else {}
    if previous:
        _check_resumable(Path(out_dir), previous, identity)
    return prompt_set, identity, previous


def pending_items(out_dir: Path, prompt_set, cfg: RunConfig, shard: tuple[int, int] | None = None,
                  engines: tuple[str, ...] | None = None) -> tuple[list[dict], list, list]:
    """(records already in the folder, the whole plan of this shard, the items still to run).
    A torn last line of records.jsonl is cut off here, so appending resumes cleanly."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    existing = read_records(Path(out_dir) / RECORDS_FILE, repair=True)
    done = {record["key"] for record in existing}
    prompts = prompt_set.prompts
    if shard is not None:
        from specaudit.shards import shard_of

        prompts = [p for p in prompts if shard_of(p.id, shard[1]) == shard[0]]
    plan = list(_plan(prompts, cfg, engines))
    return existing, plan, [item for item in plan if record_key(item[0].id, item[1], item[2]) not in done]


def run(cfg: RunConfig, out_dir: str | Path, *, pair=None, prompt_set=None, progress: bool = True, command: str | None = None,
        shard: tuple[int, int] | None = None) -> RunSummary:
    """Execute the plan into `out_dir`, skipping records already there. `shard=(i, N)` runs only
    the prompts whose stable hash falls in shard i of N (see specaudit.shards)."""
    from tqdm.auto import tqdm

    from specaudit.backends import backend_module

    started = time.perf_counter()
    out_dir = Path(out_dir)
    backend = backend_module(cfg.engines)
    if backend is not None:  # decoding happens elsewhere (a server, vLLM): the backend writes the run folder
        return backend.run_backend(cfg, out_dir, prompt_set=prompt_set, progress=progress, command=command, shard=shard)
    if cfg.executor == "ray":  # Ray actors decode; this process only writes the run folder
        from specaudit.ray_executor import run_on_ray

        return run_on_ray(cfg, out_dir, workers=cfg.workers, address=cfg.ray_address, progress=progress, command=command,
                          prompt_set=prompt_set, shard=shard)
    prompt_set, identity, previous_manifest = prepare_run(cfg, out_dir, prompt_set, shard)
    verify = cfg.load_verify()
    pair = pair or load_pair_for(cfg)

    existing, plan, todo = pending_items(out_dir, prompt_set, cfg, shard)
    manifest = run_manifest(cfg, identity, prompt_set, previous=previous_manifest, command=command, models=pair.manifest(),
                            device=device_entry(pair), versions=library_versions())
    write_json_atomic(out_dir / MANIFEST_FILE, manifest)

    eos_ids = eos_token_ids(pair)
    encoded = {p.id: encode_prompt(pair.tokenizer, p.text, cfg.chat_template) for p in prompt_set.prompts}
    check_prompt_lengths(encoded, pair.target, cfg.max_new_tokens)
    if todo:
        warm_up(pair, cfg, encoded[todo[0][0].id], verify, eos_ids)
    written = 0
    with RecordWriter(out_dir / RECORDS_FILE) as writer, tqdm(
        total=len(plan), initial=len(plan) - len(todo), desc="decoding", unit="gen", disable=not progress, file=sys.stderr
    ) as bar:
        for item in todo:
            writer.write(decode_item(pair, cfg, item, encoded[item[0].id], verify, eos_ids))
            written += 1
            bar.update(1)
    return RunSummary(out_dir, len(existing) + written, written, len(plan) - len(todo), time.perf_counter() - started)
