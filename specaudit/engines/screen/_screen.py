"""The screen: batched target sampling, then the draft evaluated along the sampled paths."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from specaudit.contracts.run import CONTROL_ENGINE
from specaudit.decoding.warping import SamplingSpec, warp
from specaudit.engines.screen._batching import token_batches
from specaudit.engines.screen._sampling import TreeShape, sample_batch, teacher_forced_acceptance
from specaudit.engines.screen_records import ScreenedPath
from specaudit.errors import InputError
from specaudit.models import DisparityPlant, NgramDraft, forward_cached
from specaudit.models._chunked import CHUNK_ELEMENTS
from specaudit.stats.acceptance import model_draft_acceptance, ngram_counts
from specaudit.stats.shape_screen import expected_shape_counts

if TYPE_CHECKING:
    from specaudit.models import ModelPair

# The draft's q from a teacher-forced call must be the q it gives step by step at decode time. Its
# TV between the two call shapes is compared with the target's own on the same path: that is the
# float noise of the model's dtype (~5e-6 in float32, ~4e-2 in bfloat16, measured on the default
# pair), which every engine has too (verification scores k + 1 tokens per call, vanilla one). A
# draft is call-invariant when its TV stays below CALL_INVARIANCE_TV or FLOAT_NOISE_FACTOR x the
# target's; torch's dynamic int8 reaches 0.84, five orders above float32's floor.
CALL_INVARIANCE_TV = 1e-3
FLOAT_NOISE_FACTOR = 3.0


def draft_kind(draft: object) -> str:
    if isinstance(draft, NgramDraft):
        return "ngram"
    if isinstance(draft, torch.nn.Module):
        return "model"
    raise InputError(f"the screen needs a draft model or ngram, got {type(draft).__name__}")


def call_shape_tv(model: torch.nn.Module, ids: torch.Tensor, positions: int, vocab_size: int) -> float:
    """Max TV over the last `positions` positions of `ids` ([1, L]) between one teacher-forced call
    and a cached prefix followed by one call per token (how decoding calls a draft)."""
    from transformers import DynamicCache

    split = ids.shape[1] - positions
    with torch.inference_mode():
        whole = model(input_ids=ids).logits[0, split:, :vocab_size]
        cache = DynamicCache(config=model.config)
        forward_cached(model, ids[:, :split], cache)
        stepwise = torch.cat([forward_cached(model, ids[:, i : i + 1], cache)[0] for i in range(split, ids.shape[1])])
    spec = SamplingSpec(1.0)
    return float((0.5 * (warp(whole, spec) - warp(stepwise[:, :vocab_size], spec)).abs().sum(-1)).max())


def draft_batch_invariance(pair: ModelPair, records: list[dict], positions: int = 6) -> dict:
    """Whether teacher-forcing the draft reproduces the q it sampled from during decoding.

    Scoring recomputes q in one batched pass; decoding computed it one cached step at a time.
    For most drafts the two agree to the float noise of their dtype, which the target's own TV
    between the same two call shapes measures. Drafts with dynamic activation quantisation
    (torch's int8 dynamic linear: one scale per call over all tokens in it) do not: their q
    depends on how they were called, so q-based tests must use the q the engine recorded.
    """
    record = next((r for r in records if r["engine"] != CONTROL_ENGINE and len(r["output_token_ids"]) > positions), None)
    if record is None or not pair.draft_is_model:
        return {"checked": False}
    ids = torch.tensor([record["prompt_token_ids"] + record["output_token_ids"]], device=pair.device)
    max_tv = call_shape_tv(pair.draft, ids, positions, pair.vocab_size)
    target_tv = call_shape_tv(pair.target, ids, positions, pair.vocab_size)
    tolerance = max(CALL_INVARIANCE_TV, FLOAT_NOISE_FACTOR * target_tv)
    return {
        "checked": True,
        "batch_invariant": max_tv < tolerance,
        "max_tv": max_tv,
        "target_max_tv": target_tv,  # the dtype's float noise between these call shapes
        "tolerance": tolerance,
        "positions": positions,
        "record": record["key"],
    }


def check_call_invariance(
    target: torch.nn.Module, draft: torch.nn.Module, prompt: list[int], path: list[int], device: torch.device | str
) -> dict:
    """Refuse a draft whose teacher-forced q differs from its step-by-step q by more than float
    noise (draft_batch_invariance); return the measurement ({"checked": False} on a path too short)."""
    from types import SimpleNamespace

    record = {"engine": "screen", "key": "screen-guard", "prompt_token_ids": prompt, "output_token_ids": path}
    probe = SimpleNamespace(target=target, draft=draft, draft_is_model=True, device=device, vocab_size=draft.config.vocab_size)
    result = draft_batch_invariance(probe, [record])
    if result["checked"] and not result["batch_invariant"]:
        raise InputError(
            f"the draft is not call-invariant (teacher-forced and step-by-step draft distributions differ by TV up to "
            f"{result['max_tv']:.2f}, the target's float noise between the same calls is {result['target_max_tv']:.0e}), "
            "so the screen cannot reproduce the q it gives at decode time; run the engines alone instead (--engines vanilla,speculative)"
        )
    return result


def screen_paths(
    target: torch.nn.Module,
    draft: torch.nn.Module | NgramDraft,
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
    batch_tokens: int | None = None,
    check_draft: bool = True,
    plant: DisparityPlant | None = None,
    planted: list[bool] | None = None,
    chunk_elements: int | None = CHUNK_ELEMENTS,
    tree: TreeShape | None = None,
) -> list[ScreenedPath]:
    """Screen every (prompt, seed) row; rows come back in input order. Batches group prompts of
    similar length (less padding), at most `batch_size` rows and `batch_tokens` padded positions
    (screen._batching.token_batches); no row's result depends on which batch it landed in.
    `plant` mixes the draft's q on the rows where `planted` is true (the planted group's prompts),
    as the speculative engine does for those prompts. The draft's logits are made `chunk_elements`
    entries at a time (None: the whole batch at once; the results are equal). With `tree` (a model
    draft only) each row also gets the tree's expected counts along its path (stats.shape_screen)."""
    kind = draft_kind(draft)
    if plant is not None and kind != "model":
        raise InputError("--plant-disparity mixes a draft model's distribution, and the ngram draft has none; use a model draft")
    device = next(target.parameters()).device
    batches = token_batches([len(p) for p in prompts], max_new_tokens, max_rows=batch_size, max_tokens=batch_tokens)
    results: list[ScreenedPath | None] = [None] * len(prompts)
    checked = not check_draft or kind != "model"
    for rows in batches:
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
                check_call_invariance(target, draft, prompts[rows[longest]], batch.tokens[longest], device)
                checked = True
            mask = None
            if plant is not None and planted is not None and any(planted[i] for i in rows):
                mask = torch.tensor([planted[i] for i in rows], device=device)
            beta, accept, *depth_accept = teacher_forced_acceptance(
                draft,
                batch,
                spec=spec,
                vocab_size=vocab_size,
                plant=plant if mask is not None else None,
                planted_rows=mask,
                chunk_elements=chunk_elements,
                tree=tree,
            )
            del batch.probs
        elapsed = time.perf_counter() - started
        for r, index in enumerate(rows):
            path = batch.tokens[r]
            if kind == "model":
                acceptance = model_draft_acceptance(beta[r, : len(path)].tolist(), accept[r, : len(path)].tolist(), k, max_new_tokens)
            else:
                acceptance = ngram_counts(draft, prompts[index], path, k, max_new_tokens)
            shape = expected_shape_counts(depth_accept[0][r, :, : len(path)].tolist(), max_new_tokens) if kind == "model" and tree else None
            results[index] = ScreenedPath(path, batch.finish_reasons[r], acceptance, elapsed, len(rows), shape)
    return results  # type: ignore[return-value]
