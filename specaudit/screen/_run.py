"""`--engines screen`: the plan screened into ordinary records of engine "screen".

Each record holds the target sample (`output_token_ids`, drawn with the runner's derive_seed, so
it is the vanilla engine's sample for that seed up to float ties) and the speculative counts
expected along it at the run's k: `proposed`, `accepted`, `steps` (floats: expectations given the
path; exact counts for n-gram), `expected_reached`, and per output position `position_beta`
(sum min(p_t, q_t)) and `position_accept` (min(1, q_t(x_t)/p_t(x_t)); 1/0 for n-gram). `wall_s`
and `ttft_s` stay empty (no engine latency is measured); `screen.row_s` is the record's share of
its batch's time. Records are written batch by batch, so a run resumes.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from specaudit.decoding import Generation
from specaudit.records import (
    MANIFEST_FILE,
    RECORDS_FILE,
    RecordWriter,
    write_json_atomic,
)

ENGINE = "screen"
DEFAULT_BATCH = 32


def screen_record(cfg, item, seed: int, prompt_ids: list[int], path, text: str) -> dict:
    from specaudit.runner import plan_record

    prompt, _, label, timing_only = item
    acceptance = path.acceptance
    generation = Generation(tokens=path.tokens, finish_reason=path.finish_reason, wall_s=path.batch_s / path.batch_rows, ttft_s=float("nan"),
                            steps=acceptance.steps, proposed=acceptance.proposed, accepted=acceptance.accepted,
                            accepted_per_step=acceptance.accepted_per_step, proposed_per_step=acceptance.proposed_per_step)
    record = plan_record(cfg, prompt, ENGINE, label, timing_only, seed, prompt_ids, generation, text)
    record["k"] = cfg.k
    # Not an engine's latency (the batch samples every row at once): timings stay empty, and the
    # record's share of its batch's time goes under "screen".
    record["wall_s"] = record["ttft_s"] = None
    record.update({"expected_reached": acceptance.reached, "position_beta": acceptance.beta, "position_accept": acceptance.accept_cond,
                   "screen": {"batch_rows": path.batch_rows, "batch_s": path.batch_s, "row_s": path.batch_s / path.batch_rows, "counts": "exact" if acceptance.accepted_per_step else "expected"}})
    return record


def run_backend(cfg, out_dir, *, prompt_set=None, progress: bool = True, command: str | None = None, shard=None, pair=None):
    """Screen every pending plan item into `out_dir` (same manifest and resume rules as every run)."""
    from tqdm.auto import tqdm

    from specaudit.errors import InputError
    from specaudit.models import load_pair
    from specaudit.runner import (
        RunSummary,
        derive_seed,
        device_entry,
        encode_prompt,
        eos_token_ids,
        library_versions,
        pending_items,
        prepare_run,
        run_manifest,
    )
    from specaudit.screen._screen import screen_paths

    if cfg.draft_noise:
        raise InputError(f"--engines screen cannot reproduce a planted --draft-noise ({cfg.draft_noise}): its noise depends on how the "
                         "draft is called; run the engines instead")
    started = time.perf_counter()
    out_dir = Path(out_dir)
    prompt_set, identity, previous = prepare_run(cfg, out_dir, prompt_set, shard)
    if pair is None:
        torch.set_num_threads(cfg.threads)
        pair = load_pair(cfg.target, cfg.draft, device=cfg.device, dtype=cfg.dtype)
    existing, plan, pending = pending_items(out_dir, prompt_set, cfg, shard, engines=(ENGINE,))
    todo = [item for item in pending if not item[3]]  # timing repeats mean nothing without an engine to time
    manifest = run_manifest(cfg, identity, prompt_set, previous=previous, command=command, models=pair.manifest(), device=device_entry(pair),
                            versions=library_versions())
    write_json_atomic(out_dir / MANIFEST_FILE, manifest)
    eos_ids = eos_token_ids(pair)
    pad_id = pair.tokenizer.pad_token_id if pair.tokenizer.pad_token_id is not None else min(eos_ids)
    encoded = {p.id: encode_prompt(pair.tokenizer, p.text, cfg.chat_template) for p in prompt_set.prompts}
    batch_size = int(cfg.extra.get("screen_batch", DEFAULT_BATCH))
    # Similar lengths share a batch (less padding); results do not depend on the grouping.
    todo.sort(key=lambda item: len(encoded[item[0].id]))
    written = 0
    with RecordWriter(out_dir / RECORDS_FILE) as writer, tqdm(total=len(todo), desc="screening", unit="path", disable=not progress,
                                                              file=sys.stderr) as bar:
        for begin in range(0, len(todo), batch_size):
            chunk = todo[begin : begin + batch_size]
            seeds = [derive_seed(cfg.seed, item[0].id, item[2]) for item in chunk]
            prompts = [encoded[item[0].id] for item in chunk]
            paths = screen_paths(pair.target, pair.draft, prompts, seeds, spec=cfg.sampling, k=cfg.k, max_new_tokens=cfg.max_new_tokens,
                                 eos_ids=eos_ids, vocab_size=pair.vocab_size, pad_id=pad_id, batch_size=batch_size, check_draft=begin == 0)
            for item, seed, prompt_ids, path in zip(chunk, seeds, prompts, paths):
                text = pair.tokenizer.decode(path.tokens, skip_special_tokens=True)
                writer.write(screen_record(cfg, item, seed, prompt_ids, path, text))
                written += 1
            bar.update(len(chunk))
    return RunSummary(out_dir, len(existing) + written, written, len(plan) - len(pending), time.perf_counter() - started)
