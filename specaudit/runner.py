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


def generate_one(engine: str, pair, prompt_ids: list[int], cfg: RunConfig, seed: int, verify, eos_ids: set[int], max_new_tokens: int):
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
    return speculative_generate(pair.target, pair.draft, prompt_ids, k=cfg.k, verify=verify, **common)


def _plan(prompts, cfg: RunConfig):
    """(prompt, engine, sample label, timing_only) in execution order."""
    for prompt in prompts:
        labels = [(s, False) for s in range(cfg.samples)] + [(f"t{r}", True) for r in range(cfg.timing_repeats)]
        for position, (label, timing_only) in enumerate(labels):
            order = cfg.engines if position % 2 == 0 else tuple(reversed(cfg.engines))
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
    from specaudit.models import load_pair

    torch.set_num_threads(cfg.threads)
    needs_draft = any(e != "vanilla" for e in cfg.engines)
    return load_pair(cfg.target, cfg.draft if needs_draft else None, device=cfg.device, dtype=cfg.dtype)


def run(cfg: RunConfig, out_dir: str | Path, *, pair=None, prompt_set=None, progress: bool = True, command: str | None = None,
        shard: tuple[int, int] | None = None) -> RunSummary:
    """Execute the plan into `out_dir`, skipping records already there. `shard=(i, N)` runs only
    the prompts whose stable hash falls in shard i of N (see specaudit.shards)."""
    from tqdm.auto import tqdm

    from specaudit.prompts import load_prompts

    started = time.perf_counter()
    out_dir = Path(out_dir)
    if prompt_set is None:  # prompts first: bad input fails before minutes of model loading
        prompt_set = load_prompts(cfg.prompts, column_map=cfg.column_map, dimensions=cfg.dimensions, per_group=cfg.per_group, seed=cfg.seed)
    if not prompt_set.prompts:
        raise InputError(f"prompt set {cfg.prompts!r} selected no prompts (check --dimensions / --per-group)")
    decoding = cfg.decoding_identity()
    identity = {"decoding": decoding, "prompt_set_checksum": prompt_set.checksum, "shard": list(shard) if shard else None}
    previous_manifest = read_manifest(out_dir) if (out_dir / MANIFEST_FILE).is_file() else {}
    if previous_manifest:
        _check_resumable(out_dir, previous_manifest, identity)
    verify = cfg.load_verify()
    pair = pair or load_pair_for(cfg)

    out_dir.mkdir(parents=True, exist_ok=True)
    existing = read_records(out_dir / RECORDS_FILE, repair=True)
    done = {record["key"] for record in existing}
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "created": previous_manifest.get("created") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": previous_manifest.get("command") or command or " ".join(sys.argv),
        "invocations": previous_manifest.get("invocations", 0) + 1,
        "config": cfg.to_dict(),
        **identity,
        "models": pair.manifest(),
        "versions": library_versions(),
        "device": {"type": pair.device.type, "name": torch.cuda.get_device_name(pair.device) if pair.device.type == "cuda" else platform.processor() or platform.machine(), "threads": torch.get_num_threads()},
        "seeds": {"run": cfg.seed, "derivation": "sha256(run_seed|prompt_id|sample)[:8], little-endian, 63 bits"},
        "prompt_set": prompt_set.manifest_entry(),
    }
    write_json_atomic(out_dir / MANIFEST_FILE, manifest)

    eos_ids = eos_token_ids(pair)
    encoded = {p.id: encode_prompt(pair.tokenizer, p.text, cfg.chat_template) for p in prompt_set.prompts}
    prompts = prompt_set.prompts
    if shard is not None:
        from specaudit.shards import shard_of

        prompts = [p for p in prompts if shard_of(p.id, shard[1]) == shard[0]]
    plan = list(_plan(prompts, cfg))
    todo = [item for item in plan if record_key(item[0].id, item[1], item[2]) not in done]
    if todo and cfg.warmup:  # first calls pay for allocation and kernel selection: keep them out of the timings
        first = todo[0][0]
        for _ in range(cfg.warmup):
            for engine in cfg.engines:
                generate_one(engine, pair, encoded[first.id], cfg, cfg.seed, verify, eos_ids, min(8, cfg.max_new_tokens))
    written = 0
    with RecordWriter(out_dir / RECORDS_FILE) as writer, tqdm(
        total=len(plan), initial=len(plan) - len(todo), desc="decoding", unit="gen", disable=not progress, file=sys.stderr
    ) as bar:
        for prompt, engine, label, timing_only in todo:
            seed = derive_seed(cfg.seed, prompt.id, label)
            generation = generate_one(engine, pair, encoded[prompt.id], cfg, seed, verify, eos_ids, cfg.max_new_tokens)
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
                "prompt_token_ids": encoded[prompt.id],
                "output_token_ids": generation.tokens,
                "text": pair.tokenizer.decode(generation.tokens, skip_special_tokens=True),
            }
            payload = generation.to_dict()
            payload.pop("tokens")
            record.update(payload)
            writer.write(record)
            written += 1
            bar.update(1)
    return RunSummary(out_dir, len(existing) + written, written, len(plan) - len(todo), time.perf_counter() - started)
