"""The screen: batched target sampling, then the draft evaluated along the sampled paths."""

from __future__ import annotations

import time

import torch

from specaudit.decoding.call_invariance import draft_batch_invariance
from specaudit.decoding.warping import SamplingSpec
from specaudit.engines.batched_sampling import TreeShape, sample_batch, teacher_forced_acceptance
from specaudit.engines.screen._batching import token_batches
from specaudit.engines.screen_records import ScreenedPath
from specaudit.errors import InputError
from specaudit.models import DisparityPlant, NgramDraft
from specaudit.models._chunked import CHUNK_ELEMENTS
from specaudit.stats.acceptance import model_draft_acceptance, ngram_counts
from specaudit.stats.shape_screen import expected_shape_counts


def draft_kind(draft: object) -> str:
    if isinstance(draft, NgramDraft):
        return "ngram"
    if isinstance(draft, torch.nn.Module):
        return "model"
    raise InputError(f"the screen needs a draft model or ngram, got {type(draft).__name__}")


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
