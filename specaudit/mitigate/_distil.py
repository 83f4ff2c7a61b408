"""Distil a draft on the target's own samples with an acceptance-aligned objective.

Objective: total variation between the warped target p and draft q at each position of a target
sample, TV = ½ Σ|p − q| = 1 − Σ min(p, q) = 1 − β. Minimising it maximises, position by
position, the probability that speculative sampling accepts the draft's token, which is what
the mitigation is for (DistillSpec, Zhou et al. 2023, lists TV among its best objectives for
sampled decoding). `objective="kl"` uses the forward KL(p‖q) instead: smoother gradients where
q puts almost no mass on p's tokens, but only a bound on TV (Pinsker), not TV itself.

Only the draft's upper layers and final norm are trained. The head stays frozen: in tied models
it is also the input embedding, and the frozen lower layers' outputs are computed once per
training sequence and reused, which a moving embedding would invalidate.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from specaudit.decoding import SamplingSpec, warp
from specaudit.errors import InputError
from specaudit.mitigate._acceptance import TargetSample

WEIGHTINGS = ("inverse-acceptance", "balanced", "unweighted")
OBJECTIVES = ("tv", "kl")
ALPHA_FLOOR = 0.01  # inverse-acceptance weights treat an audited α below 1% as 1%


@dataclass
class DistilResult:
    """The trained draft and what the training card records about it."""

    draft: torch.nn.Module
    objective: str
    weighting: str
    steps: int
    batch_size: int
    learning_rate: float
    trained_layers: list[int]
    trained_parameters: int
    seed: int
    loss_curve: list[float] = field(default_factory=list)
    seconds: float = 0.0


def untrainable_reason(draft: object) -> str | None:
    """Why a loaded draft cannot be distilled (no weights, quantised, not a decoder), or None."""
    if not isinstance(draft, torch.nn.Module):
        return f"the draft ({type(draft).__name__}) has no weights to train"
    layers = getattr(getattr(draft, "model", None), "layers", None)
    if layers is None or not any(p.dtype.is_floating_point for p in draft.parameters()):
        return f"the draft ({type(draft).__name__}) cannot be trained (quantised or not a decoder with model.layers)"
    return None


def trainable_layers(draft: object, train_layers: int) -> tuple[int, int]:
    """(first trained layer, layer count) of a draft that can be distilled; InputError otherwise."""
    reason = untrainable_reason(draft)
    if reason:
        raise InputError(f"{reason}; distil an early-exit:N draft or a float model folder instead")
    count = len(draft.model.layers)
    if not 1 <= train_layers <= count:
        raise InputError(f"--train-layers {train_layers}: the draft has {count} layers; choose 1..{count}")
    return count - train_layers, count


def group_weights(alpha_by_group: dict[str, float], sizes: dict[str, int], weighting: str) -> dict[str, float]:
    """Share of the training mix each group gets (shares sum to 1).

    unweighted: in proportion to the group's training prompts (every sequence alike).
    balanced: the same share for every group, whatever its size.
    inverse-acceptance: share ∝ 1/α_g of the audit, so the groups the draft serves worst get most.
    """
    if weighting not in WEIGHTINGS:
        raise InputError(f"--weighting {weighting!r}: choose one of {', '.join(WEIGHTINGS)}")
    groups = [g for g in sizes if sizes[g] > 0]
    if weighting == "unweighted":
        raw = {g: float(sizes[g]) for g in groups}
    elif weighting == "balanced":
        raw = {g: 1.0 for g in groups}
    else:
        missing = [g for g in groups if alpha_by_group.get(g) is None]
        if missing:
            raise InputError(f"inverse-acceptance weights need the audit's acceptance of every group; none for {', '.join(missing)}")
        # An audit can measure α = 0 on a small group; the floor keeps its weight finite.
        raw = {g: 1.0 / max(alpha_by_group[g], ALPHA_FLOOR) for g in groups}
    total = sum(raw.values())
    return {g: raw[g] / total for g in groups}


def sequence_weights(samples: list[TargetSample], group_of: dict[str, str | None], shares: dict[str, float]) -> np.ndarray:
    """Sampling probability of each training sequence: its group's share split evenly among the
    group's sequences; sequences outside the weighted dimension get the mean sequence weight."""
    counts: dict[str, int] = {}
    for sample in samples:
        group = group_of.get(sample.prompt_id)
        if group in shares:
            counts[group] = counts.get(group, 0) + 1
    inside = sum(counts.values())
    weights = np.array([shares[g] / counts[g] if (g := group_of.get(s.prompt_id)) in shares else float("nan") for s in samples])
    outside = np.isnan(weights)
    if outside.any():  # they keep their proportion of the data; the weighted groups share the rest
        weights[~outside] *= inside / len(samples)
        weights[outside] = 1.0 / len(samples)
    return weights / weights.sum()


def position_loss(p: torch.Tensor, draft_logits: torch.Tensor, spec: SamplingSpec, objective: str) -> torch.Tensor:
    """Per-position loss [n]: TV(p, q) or KL(p‖q), q the warped draft distribution."""
    q_spec = SamplingSpec(1.0) if spec.greedy else spec  # argmax has no gradient: train greedy drafts at temperature 1
    q = warp(draft_logits, q_spec)
    if objective == "tv":
        return 1.0 - torch.minimum(p, q).sum(-1)
    log_q = torch.log(q.clamp_min(1e-30))
    return (p * (torch.log(p.clamp_min(1e-30)) - log_q)).sum(-1)


def _upper_model(draft: torch.nn.Module, first: int) -> torch.nn.Module:
    """A view of the draft that runs only layers[first:] (modules shared, not copied), fed with
    the frozen lower layers' output as inputs_embeds. Rotary positions are applied inside each
    layer from the position ids, so this computes exactly what the full draft computes."""
    # Shallow copies share the module registry with the original: give each its own, so that
    # replacing `layers` here never truncates the draft itself.
    inner = copy.copy(draft.model)
    inner._modules = dict(draft.model._modules)
    inner.layers = draft.model.layers[first:]
    upper = copy.copy(draft)
    upper._modules = dict(draft._modules)
    upper.model = inner
    return upper


@torch.no_grad()
def _prepare(draft: torch.nn.Module, samples: list[TargetSample], first: int, progress: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per sequence: the lower layers' output (the input of the trained part) and the target's
    warped p at the continuation positions (kept from sampling)."""
    from tqdm.auto import tqdm

    device = next(draft.parameters()).device
    cache = []
    for sample in tqdm(samples, desc="training data", unit="seq", disable=not progress, file=sys.stderr):
        ids = torch.tensor([sample.prompt_ids + sample.continuation], device=device)
        hidden = draft.model(input_ids=ids, output_hidden_states=True).hidden_states[first]
        cache.append((hidden.detach(), sample.target_probs))
    return cache


def _held_out_loss(
    draft: torch.nn.Module,
    first: int,
    cache: list[tuple[torch.Tensor, torch.Tensor]],
    samples: list[TargetSample],
    spec: SamplingSpec,
    vocab_size: int,
    objective: str,
) -> float:
    upper = _upper_model(draft, first)
    total, count = 0.0, 0
    with torch.no_grad():
        for (hidden, p), sample in zip(cache, samples):
            losses = _sequence_loss(upper, hidden, p, sample, spec, vocab_size, objective)
            total += float(losses.sum())
            count += len(losses)
    return total / count if count else float("nan")


def _sequence_loss(
    upper: torch.nn.Module, hidden: torch.Tensor, p: torch.Tensor, sample: TargetSample, spec: SamplingSpec, vocab_size: int, objective: str
) -> torch.Tensor:
    start = len(sample.prompt_ids) - 1
    states = upper.model(inputs_embeds=hidden.to(upper.lm_head.weight.dtype), use_cache=False).last_hidden_state[
        0, start : start + len(sample.continuation)
    ]
    logits = upper.lm_head(states)[:, :vocab_size]
    return position_loss(p.float(), logits, spec, objective)


def distil(
    target: torch.nn.Module,
    draft: torch.nn.Module,
    samples: list[TargetSample],
    weights: np.ndarray,
    *,
    spec: SamplingSpec,
    vocab_size: int,
    objective: str = "tv",
    weighting: str = "inverse-acceptance",
    steps: int = 60,
    batch_size: int = 4,
    learning_rate: float = 3e-4,
    train_layers: int = 2,
    seed: int = 0,
    progress: bool = False,
    prepared: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> DistilResult:
    """Train a copy of `draft` (upper `train_layers` layers + final norm) for `steps` steps of
    `batch_size` sequences drawn from `samples` with probabilities `weights`; `draft` is untouched.
    `prepared` reuses the frozen inputs of an earlier call on the same draft and samples."""
    from tqdm.auto import tqdm

    if objective not in OBJECTIVES:
        raise InputError(f"--objective {objective!r}: choose tv or kl")
    samples_used = [i for i, s in enumerate(samples) if s.continuation]
    if not samples_used:
        raise InputError("no target sample has any new token to train on (raise --max-new-tokens)")
    first, count = trainable_layers(draft, train_layers)
    started = time.perf_counter()
    student = copy.deepcopy(draft).float()  # trained in float32 whatever the serving dtype (bf16 Adam steps underflow)
    cache = prepared if prepared is not None else _prepare(student, samples, first, progress)
    trained = list(student.model.layers[first:].parameters()) + list(student.model.norm.parameters())
    for parameter in student.parameters():
        parameter.requires_grad_(False)
    for parameter in trained:
        parameter.requires_grad_(True)
    upper = _upper_model(student, first)
    upper.train()
    optimizer = torch.optim.AdamW(trained, lr=learning_rate, weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    probabilities = torch.tensor(np.asarray(weights)[samples_used], dtype=torch.float64)
    curve: list[float] = []
    for _ in tqdm(range(steps), desc=f"distil ({weighting})", unit="step", disable=not progress, file=sys.stderr):
        picks = torch.multinomial(probabilities, batch_size, replacement=True, generator=generator).tolist()
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        for pick in picks:
            index = samples_used[pick]
            hidden, p = cache[index]
            loss = _sequence_loss(upper, hidden, p, samples[index], spec, vocab_size, objective).mean() / batch_size
            loss.backward()
            step_loss += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        curve.append(step_loss)
    for parameter in student.parameters():
        parameter.requires_grad_(False)
    student = student.to(next(draft.parameters()).dtype).eval()  # served, measured and saved in the draft's own dtype
    return DistilResult(
        draft=student,
        objective=objective,
        weighting=weighting,
        steps=steps,
        batch_size=batch_size,
        learning_rate=learning_rate,
        trained_layers=list(range(first, count)),
        trained_parameters=sum(p.numel() for p in trained),
        seed=seed,
        loss_curve=curve,
        seconds=time.perf_counter() - started,
    )


def mean_objective(
    target: torch.nn.Module,
    draft: torch.nn.Module,
    samples: list[TargetSample],
    *,
    spec: SamplingSpec,
    vocab_size: int,
    objective: str = "tv",
) -> float:
    """The training objective averaged over every position of `samples` (e.g. held-out ones)."""
    first = len(draft.model.layers) - 1
    cache = _prepare(draft, samples, first, progress=False)
    return _held_out_loss(draft, first, cache, samples, spec, vocab_size, objective)


def smooth(curve: list[float], window: int = 10) -> list[float]:
    """A running mean of the loss curve (for the card's plot-free summary)."""
    out = []
    for i in range(len(curve)):
        part = curve[max(0, i - window + 1) : i + 1]
        out.append(sum(part) / len(part))
    return [round(v, 5) if math.isfinite(v) else v for v in out]
