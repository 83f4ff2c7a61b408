"""Batched target sampling: many prompts x samples per forward pass, KV-cached, left-padded. Shared:
the screen (engines.screen) draws its paths with it, and mitigate measures acceptance along them.

Rows are left-padded to the longest prompt of the batch; the attention mask hides the padding
and position ids count only real tokens (cumsum(mask) - 1), so each row's logits are those of
the same prompt decoded alone, to float tolerance (tests/screen check this). A row draws its
randomness from its own torch.Generator, seeded per (prompt, sample) like the runner's
derive_seed, through the same warp and sample_from as the vanilla engine: a row's tokens never
depend on its batch-mates, and for a given seed they are the vanilla engine's tokens up to
float ties at a CDF boundary.

Prompts of one batch usually share a prefix (the chat template's system turn: 24 tokens of the
~65 of a core prompt on the default model). It is run once, at batch 1, and its cache repeated
for every row; the rest of each prompt is left-padded after it. Masked padding in the middle and
position ids that count real tokens keep each row's logits those of its prompt alone.

Shapes: B rows, C = shared prefix, P = C + longest rest of a prompt, T = max_new_tokens, V = vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from transformers import DynamicCache

from specaudit.decoding._generation import finish
from specaudit.decoding.verify import sample_from
from specaudit.decoding.warping import Prefix, SamplingSpec, warp
from specaudit.models import PlantedDraft, forward_cached
from specaudit.models._chunked import CHUNK_ELEMENTS, head_logits, last_hidden_states, plain_head, positions_per_chunk
from specaudit.stats.acceptance import position_acceptance

if TYPE_CHECKING:
    from specaudit.models import DisparityPlant

TreeShape = tuple[tuple[int, ...], str]  # a tree's branching per depth and how its children are drawn ("sampled", "top-k")


@dataclass
class SampledBatch:
    """What one batch of target sampling produced."""

    tokens: list[list[int]]  # per row, cut after EOS or at the budget
    finish_reasons: list[str]  # "eos" or "length"
    input_ids: torch.Tensor  # [B, P + T']: left-padded prompts, then the sampled tokens (pad after a row ends)
    attention_mask: torch.Tensor  # [B, P + T']: 1 on real tokens
    prompt_width: int  # P
    probs: torch.Tensor | None  # [B, T', V] warped target distribution at each output position (when kept)
    prefix: int = 0  # C: leading tokens every row shares (computed once, at batch 1)
    prompts: list[list[int]] = field(default_factory=list)  # each row's prompt (penalties count it)


def path_prefixes(batch: SampledBatch, spec: SamplingSpec, end: int) -> list[Prefix] | None:
    """Per row, the tokens before output position `end - 1` of its path (prompt and sampled
    tokens): what `warp` needs for a block of positions ending there. None when the spec does
    not penalise (the distribution at a position then depends on the logits alone)."""
    if not spec.penalised:
        return None
    paths = batch.input_ids[:, batch.prompt_width : batch.prompt_width + end - 1].tolist()
    return [Prefix(prompt, path) for prompt, path in zip(batch.prompts, paths)]


def padded_prompts(prompts: list[list[int]], pad_id: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, P] ids and mask, each prompt right-aligned (left padding)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long, device=device)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


# Below this many shared tokens a separate prefix pass costs more than it saves.
MIN_SHARED_PREFIX = 8


def shared_prefix(prompts: list[list[int]]) -> int:
    """C: the tokens every prompt starts with, leaving each prompt at least one token of its own
    (the first forward pass feeds every row something); 0 below MIN_SHARED_PREFIX or for one row."""
    if len(prompts) < 2:
        return 0
    limit = min(len(p) for p in prompts) - 1
    length = 0
    while length < limit and all(p[length] == prompts[0][length] for p in prompts):
        length += 1
    return length if length >= MIN_SHARED_PREFIX else 0


def cached_prefix(model: torch.nn.Module, prefix: list[int], rows: int, device: torch.device | str) -> DynamicCache:
    """A cache holding `prefix` for each of `rows` rows, from one batch-1 pass."""
    cache = DynamicCache(config=model.config)
    if prefix:
        forward_cached(model, torch.tensor([prefix], dtype=torch.long, device=device), cache)
        cache.batch_repeat_interleave(rows)
    return cache


def position_ids_of(mask: torch.Tensor) -> torch.Tensor:
    """Positions counting only real tokens; padding gets 0 (it is masked anyway)."""
    return (mask.cumsum(dim=-1) - 1).clamp_min(0)


@torch.inference_mode()
def sample_batch(
    model: torch.nn.Module,
    prompts: list[list[int]],
    seeds: list[int],
    *,
    spec: SamplingSpec,
    max_new_tokens: int,
    eos_ids: set[int],
    vocab_size: int,
    pad_id: int,
    keep_probs: bool = False,
) -> SampledBatch:
    """Sample every row to EOS or `max_new_tokens`; one forward pass per token for the whole batch."""
    device = next(model.parameters()).device
    rows = len(prompts)
    prefix = shared_prefix(prompts)
    cache = cached_prefix(model, prompts[0][:prefix], rows, device)
    ids, mask = padded_prompts([p[prefix:] for p in prompts], pad_id, device)
    shared = torch.tensor([prompts[0][:prefix]] * rows, dtype=torch.long, device=device).reshape(rows, prefix)
    generators = [torch.Generator(device=device).manual_seed(int(seed)) for seed in seeds]
    tokens: list[list[int]] = [[] for _ in range(rows)]
    reasons: list[str | None] = [None] * rows
    # Filled in place, step by step: stacking a list of steps would hold every step twice.
    kept = torch.empty((rows, max_new_tokens, vocab_size), dtype=torch.float32, device=device) if keep_probs else None
    steps = 0
    columns = [shared, ids]
    masks = [torch.ones_like(shared), mask]
    feed, feed_positions = ids, position_ids_of(torch.cat(masks, dim=1))[:, prefix:]
    for _ in range(max_new_tokens):
        full_mask = torch.cat(masks, dim=1)
        logits = forward_cached(model, feed, cache, attention_mask=full_mask, position_ids=feed_positions)
        prefixes = [Prefix(prompt, row_tokens) for prompt, row_tokens in zip(prompts, tokens)] if spec.penalised else None
        probs = warp(logits[:, -1, :vocab_size], spec, prefixes)
        if kept is not None:
            kept[:, steps] = probs
        steps += 1
        step_tokens = torch.full((rows,), pad_id, dtype=torch.long, device=device)
        alive = torch.zeros((rows,), dtype=torch.long, device=device)
        for row in range(rows):
            if reasons[row] is not None:
                continue
            token = sample_from(probs[row], generators[row])
            tokens[row].append(token)
            tokens[row], reasons[row] = finish(tokens[row], eos_ids, max_new_tokens)
            step_tokens[row], alive[row] = token, 1
        columns.append(step_tokens[:, None])
        masks.append(alive[:, None])
        if all(reason is not None for reason in reasons):
            break
        feed = step_tokens[:, None]
        feed_positions = full_mask.sum(dim=1, keepdim=True)  # the new token follows every real token so far
    return SampledBatch(
        tokens=tokens,
        finish_reasons=[reason or "length" for reason in reasons],
        input_ids=torch.cat(columns, dim=1),
        attention_mask=torch.cat(masks, dim=1),
        prompt_width=prefix + ids.shape[1],
        probs=kept[:, :steps] if kept is not None else None,
        prefix=prefix,
        prompts=[list(p) for p in prompts],
    )


@torch.inference_mode()
def teacher_forced_probs(model: torch.nn.Module, batch: SampledBatch, *, spec: SamplingSpec, vocab_size: int) -> torch.Tensor:
    """[B, T', V]: the model's warped distribution at every output position of the batch's paths,
    in one forward pass over prompts and sampled tokens (same padding, mask and positions)."""
    outputs = batch.input_ids.shape[1] - batch.prompt_width
    device = batch.input_ids.device
    cache = cached_prefix(model, batch.input_ids[0, : batch.prefix].tolist(), batch.input_ids.shape[0], device)
    logits = forward_cached(
        model,
        batch.input_ids[:, batch.prefix :],
        cache,
        logits_to_keep=outputs + 1,
        attention_mask=batch.attention_mask,
        position_ids=position_ids_of(batch.attention_mask)[:, batch.prefix :],
    )
    return warp(logits[:, :outputs, :vocab_size], spec, path_prefixes(batch, spec, outputs))


@torch.inference_mode()
def teacher_forced_acceptance(
    draft: torch.nn.Module,
    batch: SampledBatch,
    *,
    spec: SamplingSpec,
    vocab_size: int,
    plant: DisparityPlant | None = None,
    planted_rows: torch.Tensor | None = None,
    chunk_elements: int | None = CHUNK_ELEMENTS,
    tree: TreeShape | None = None,
) -> tuple[torch.Tensor, ...]:
    """(beta, accept_cond), each [B, T']: position_acceptance of the batch's kept target
    distributions against the draft's teacher-forced ones along the batch's paths. With `tree`
    (branching per depth, how children are drawn), a third tensor [B, D, T']: the acceptance of
    each path position were it at depth d of a tree step (stats.shape_screen.tree_accept_cond).

    The draft's logits are made a few positions at a time from its last hidden states (about
    `chunk_elements` entries per chunk), so the draft's [B, T', V] never exists beside the
    target's: at a 151,936-token vocabulary that is what decides whether a batch fits in memory.
    `plant` mixes the draft's logits on `planted_rows` (bool [B]) as PlantedDraft does. Equal to
    the whole-batch computation (`chunk_elements=None`, also taken for a draft whose logits are
    not a plain output layer of its hidden states) bit for bit, and to float32 rounding (~1e-8)
    on planted rows; tests/engines/screen/test_chunked_logits.py checks both."""
    path_ids = batch.input_ids[:, batch.prompt_width :]
    if chunk_elements is None or not plain_head(draft):
        rows_draft = draft if plant is None else PlantedDraft(draft, plant, vocab_size, rows=planted_rows)
        q = teacher_forced_probs(rows_draft, batch, spec=spec, vocab_size=vocab_size)
        # row by row: float64 copies of [B, T, V] would cost gigabytes at a real vocabulary
        parts = [position_acceptance(batch.probs[r], q[r], path_ids[r]) for r in range(q.shape[0])]
        chain = torch.stack([b for b, _ in parts]), torch.stack([a for _, a in parts])
        if tree is None:
            return chain
        return (*chain, torch.stack([_tree_rows(batch.probs[r], q[r], path_ids[r], tree) for r in range(q.shape[0])]))
    outputs = path_ids.shape[1]
    device = batch.input_ids.device
    cache = cached_prefix(draft, batch.input_ids[0, : batch.prefix].tolist(), batch.input_ids.shape[0], device)
    hidden = last_hidden_states(
        draft,
        batch.input_ids[:, batch.prefix :],
        cache,
        attention_mask=batch.attention_mask,
        position_ids=position_ids_of(batch.attention_mask)[:, batch.prefix :],
    )
    hidden = hidden[:, hidden.shape[1] - outputs - 1 : hidden.shape[1] - 1]  # the positions that predict each output token
    del cache
    rows = path_ids.shape[0]
    beta = torch.zeros((rows, outputs), dtype=torch.float64, device=device)
    accept = torch.zeros((rows, outputs), dtype=torch.float64, device=device)
    depth_accept = None if tree is None else torch.zeros((rows, len(tree[0]), outputs), dtype=torch.float64, device=device)
    step = positions_per_chunk(rows, vocab_size, chunk_elements)
    for lo in range(0, outputs, step):
        hi = min(lo + step, outputs)
        logits = head_logits(draft, hidden[:, lo:hi])
        if plant is not None:
            logits = plant.mix(logits, vocab_size, planted_rows)
        q = warp(logits[..., :vocab_size], spec, path_prefixes(batch, spec, hi))
        for r in range(rows):  # row by row, as the whole-batch path: the same sums in the same order
            beta[r, lo:hi], accept[r, lo:hi] = position_acceptance(batch.probs[r, lo:hi], q[r], path_ids[r, lo:hi])
            if depth_accept is not None:
                depth_accept[r, :, lo:hi] = _tree_rows(batch.probs[r, lo:hi], q[r], path_ids[r, lo:hi], tree)
    return (beta, accept) if depth_accept is None else (beta, accept, depth_accept)


def _tree_rows(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, tree: TreeShape) -> torch.Tensor:
    """[D, T]: each position's acceptance at each depth of the tree (one computation per distinct branching)."""
    from specaudit.stats.shape_screen import tree_accept_cond

    branching, children = tree
    by_count = {b: tree_accept_cond(p, q, tokens, b, children) for b in set(branching)}
    return torch.stack([by_count[b] for b in branching])
