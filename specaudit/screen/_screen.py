"""The screen: batched target sampling, then the draft evaluated along the sampled paths."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from specaudit.contracts.run import CONTROL_ENGINE
from specaudit.decoding.warping import SamplingSpec, warp
from specaudit.errors import InputError
from specaudit.models import DisparityPlant, NgramDraft, PlantedDraft, forward_cached
from specaudit.screen._acceptance import (
    PathAcceptance,
    model_draft_acceptance,
    ngram_counts,
    position_acceptance,
)
from specaudit.screen._sampling import sample_batch, teacher_forced_probs

# Above this TV between teacher-forced and step-by-step draft distributions the screen's q is not
# the q decoding uses (float noise of a call-invariant draft is ~1e-6; torch's dynamic int8 reaches 0.84).
CALL_INVARIANCE_TV = 1e-3


@dataclass
class ScreenedPath:
    """One row of the screen: a target sample and the speculative counts expected along it."""

    tokens: list[int]
    finish_reason: str
    acceptance: PathAcceptance
    batch_s: float  # wall time of the row's batch (sampling + draft pass), shared by its rows
    batch_rows: int


def draft_kind(draft) -> str:
    if isinstance(draft, NgramDraft):
        return "ngram"
    if isinstance(draft, torch.nn.Module):
        return "model"
    raise InputError(f"the screen needs a draft model or ngram, got {type(draft).__name__}")


def draft_batch_invariance(pair, records: list[dict], positions: int = 6) -> dict:
    """Whether teacher-forcing the draft reproduces the q it sampled from during decoding.

    Scoring recomputes q in one batched pass; decoding computed it one cached step at a time.
    For most drafts the two agree to float noise. Drafts with dynamic activation quantisation
    (torch's int8 dynamic linear: one scale per call over all tokens in it) do not: their q
    depends on how they were called, so q-based tests must use the q the engine recorded.
    """
    from transformers import DynamicCache

    record = next((r for r in records if r["engine"] != CONTROL_ENGINE and len(r["output_token_ids"]) > positions), None)
    if record is None or not pair.draft_is_model:
        return {"checked": False}
    ids = torch.tensor([record["prompt_token_ids"] + record["output_token_ids"]], device=pair.device)
    split = ids.shape[1] - positions
    with torch.inference_mode():
        whole = pair.draft(input_ids=ids).logits[0, split:, : pair.vocab_size]
        cache = DynamicCache(config=pair.draft.config)
        forward_cached(pair.draft, ids[:, :split], cache)
        stepwise = torch.cat([forward_cached(pair.draft, ids[:, i : i + 1], cache)[0] for i in range(split, ids.shape[1])])
    spec = SamplingSpec(1.0)
    tv = 0.5 * (warp(whole, spec) - warp(stepwise[:, : pair.vocab_size], spec)).abs().sum(-1)
    max_tv = float(tv.max())
    return {
        "checked": True,
        "batch_invariant": max_tv < CALL_INVARIANCE_TV,
        "max_tv": max_tv,
        "positions": positions,
        "record": record["key"],
    }


def check_call_invariance(draft, prompt: list[int], path: list[int], device) -> float | None:
    """Refuse a draft whose teacher-forced q differs from its step-by-step q (draft_batch_invariance);
    return the TV measured (None when the path is too short to check)."""
    from types import SimpleNamespace

    record = {"engine": "screen", "key": "screen-guard", "prompt_token_ids": prompt, "output_token_ids": path}
    probe = SimpleNamespace(draft=draft, draft_is_model=True, device=device, vocab_size=draft.config.vocab_size)
    result = draft_batch_invariance(probe, [record])
    if result.get("checked") and result["max_tv"] >= CALL_INVARIANCE_TV:
        raise InputError(
            f"the draft is not call-invariant (teacher-forced and step-by-step draft distributions differ by TV up to "
            f"{result['max_tv']:.2f}), so the screen cannot reproduce the q it gives at decode time; run the engines alone instead (--engines vanilla,speculative)"
        )
    return result.get("max_tv")


def screen_paths(
    target: torch.nn.Module,
    draft,
    prompts: list[list[int]],
    seeds: list[int],
    *,
    spec: SamplingSpec,
    k: int,
    max_new_tokens: int,
    eos_ids: set[int],
    vocab_size: int,
    pad_id: int,
    batch_size: int = 32,
    check_draft: bool = True,
    plant: DisparityPlant | None = None,
    planted: list[bool] | None = None,
) -> list[ScreenedPath]:
    """Screen every (prompt, seed) row; rows come back in input order. Batches group prompts of
    similar length (less padding); no row's result depends on which batch it landed in.
    `plant` mixes the draft's q on the rows where `planted` is true (the planted group's prompts),
    as the speculative engine does for those prompts."""
    kind = draft_kind(draft)
    if plant is not None and kind != "model":
        raise InputError("--plant-disparity mixes a draft model's distribution, and the ngram draft has none; use a model draft")
    device = next(target.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    results: list[ScreenedPath | None] = [None] * len(prompts)
    checked = not check_draft or kind != "model"
    for begin in range(0, len(order), batch_size):
        rows = order[begin : begin + batch_size]
        started = time.perf_counter()
        batch = sample_batch(
            target,
            [prompts[i] for i in rows],
            [seeds[i] for i in rows],
            spec=spec,
            max_new_tokens=max_new_tokens,
            eos_ids=eos_ids,
            vocab_size=vocab_size,
            pad_id=pad_id,
            keep_probs=kind == "model",
        )
        if kind == "model":
            if not checked:
                longest = max(range(len(rows)), key=lambda r: len(batch.tokens[r]))
                check_call_invariance(draft, prompts[rows[longest]], batch.tokens[longest], device)
                checked = True
            rows_draft = draft
            if plant is not None and planted is not None and any(planted[i] for i in rows):
                mask = torch.tensor([planted[i] for i in rows], device=device)
                rows_draft = PlantedDraft(draft, plant, vocab_size, rows=mask)
            q = teacher_forced_probs(rows_draft, batch, spec=spec, vocab_size=vocab_size)
            path_ids = batch.input_ids[:, batch.prompt_width :]
            # row by row: float64 copies of [B, T, V] would cost gigabytes at the default vocabulary
            parts = [position_acceptance(batch.probs[r], q[r], path_ids[r]) for r in range(len(rows))]
            beta, accept = torch.stack([b for b, _ in parts]), torch.stack([a for _, a in parts])
            del q, batch.probs
        elapsed = time.perf_counter() - started
        for r, index in enumerate(rows):
            path = batch.tokens[r]
            if kind == "model":
                acceptance = model_draft_acceptance(beta[r, : len(path)].tolist(), accept[r, : len(path)].tolist(), k, max_new_tokens)
            else:
                acceptance = ngram_counts(draft, prompts[index], path, k, max_new_tokens)
            results[index] = ScreenedPath(path, batch.finish_reasons[r], acceptance, elapsed, len(rows))
    return results  # type: ignore[return-value]
