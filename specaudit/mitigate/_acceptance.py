"""Per-prompt acceptance of a (target, draft) pair, measured along the target's own samples.

This is the one place the mitigation measures acceptance; training, the policies and the
re-audit all call `measure_acceptance`, so a faster or exact screen can replace its inside
without touching them.

At a position whose context is a target sample, speculative sampling accepts the draft's token
with probability β = Σ_v min(p(v), q(v)) = 1 − TV(p, q) (p, q the warped target and draft
distributions). Averaging β over positions of target samples therefore estimates the
per-position acceptance α of the decoding the target would do, without running the speculative
engine: one batched sampling pass of the target, then one teacher-forced pass of each model.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field

import numpy as np
import torch

from specaudit.decoding import SamplingSpec, warp


@dataclass
class TargetSample:
    """One sampled continuation of one prompt (ids of the prompt and of the new tokens)."""

    prompt_id: str
    prompt_ids: list[int]
    continuation: list[int]
    # The target's warped distributions at the continuation positions (float32), kept after the
    # first scoring: every later draft is compared with the same p without another target pass.
    target_probs: torch.Tensor | None = field(default=None, repr=False)

    def probs(self, target: torch.nn.Module, spec: SamplingSpec, vocab_size: int) -> torch.Tensor:
        if self.target_probs is None:
            with torch.no_grad():  # not inference mode: training reads these tensors under autograd
                self.target_probs = warp(continuation_logits(target, self, vocab_size), spec).float()
        return self.target_probs


@dataclass
class PromptAcceptance:
    """β summed over the positions of a prompt's target samples; α = beta_sum / positions."""

    prompt_id: str
    positions: int
    beta_sum: float
    per_sample: list[float] = field(default_factory=list)  # mean β of each sample

    @property
    def alpha(self) -> float:
        return self.beta_sum / self.positions if self.positions else float("nan")


def _seed_for(seed: int, prompt_id: str, sample: int) -> int:
    digest = hashlib.sha256(f"mitigate|{seed}|{prompt_id}|{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@torch.inference_mode()
def sample_target(
    target: torch.nn.Module,
    prompts: dict[str, list[int]],
    *,
    spec: SamplingSpec,
    samples: int,
    max_new_tokens: int,
    eos_ids: set[int],
    pad_id: int,
    seed: int = 0,
    batch_size: int = 16,
    progress: bool = False,
) -> list[TargetSample]:
    """`samples` continuations of each prompt from the target, batched (left padding).

    transformers' sampling applies temperature, top-k and top-p in the same order and with the
    same tie rules as specaudit's `warp` (see decoding/warping.py), so these are samples of the
    warped target distribution the speculative sampler must reproduce.
    """
    from tqdm.auto import tqdm

    device = next(target.parameters()).device
    jobs = [(pid, ids, s) for pid, ids in prompts.items() for s in range(samples)]
    jobs.sort(key=lambda job: len(job[1]))  # similar lengths together: less padding
    out: list[TargetSample] = []
    from transformers import GenerationConfig

    # A fresh config: the model's own generation defaults (top_k=50, a repetition penalty, ...)
    # would change the distribution being sampled.
    options = {
        "do_sample": not spec.greedy,
        "max_new_tokens": max_new_tokens,
        "pad_token_id": pad_id,
        "eos_token_id": sorted(eos_ids) or None,
    }
    if not spec.greedy:
        options.update(temperature=spec.temperature, top_k=spec.top_k, top_p=spec.top_p)
    config = GenerationConfig(**options)
    with tqdm(total=len(jobs), desc="target samples", unit="seq", disable=not progress, file=sys.stderr) as bar:
        for start in range(0, len(jobs), batch_size):
            batch = jobs[start : start + batch_size]
            width = max(len(ids) for _, ids, _ in batch)
            input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long, device=device)
            mask = torch.zeros((len(batch), width), dtype=torch.long, device=device)
            for row, (_, ids, _) in enumerate(batch):
                input_ids[row, width - len(ids) :] = torch.tensor(ids, device=device)
                mask[row, width - len(ids) :] = 1
            torch.manual_seed(_seed_for(seed, batch[0][0], batch[0][2]))
            generated = target.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)[:, width:].tolist()
            for (pid, ids, _), new in zip(batch, generated):
                cut = next((i + 1 for i, token in enumerate(new) if token in eos_ids), len(new))
                out.append(TargetSample(pid, list(ids), new[:cut]))
            bar.update(len(batch))
    order = {pid: i for i, pid in enumerate(prompts)}
    out.sort(key=lambda s: order[s.prompt_id])
    return out


def continuation_logits(model: torch.nn.Module, sample: TargetSample, vocab_size: int) -> torch.Tensor:
    """Teacher-forced logits [n_new, V] that predict each token of the continuation."""
    device = next(model.parameters()).device
    ids = torch.tensor([sample.prompt_ids + sample.continuation], device=device)
    start = len(sample.prompt_ids) - 1
    logits = model(input_ids=ids).logits[0, start : start + len(sample.continuation), :vocab_size]
    return logits


@torch.no_grad()
def position_betas(
    target: torch.nn.Module, draft: torch.nn.Module, sample: TargetSample, spec: SamplingSpec, vocab_size: int
) -> torch.Tensor:
    """β_t = Σ min(p_t, q_t) at each position of one target sample."""
    p = sample.probs(target, spec, vocab_size)
    q = warp(continuation_logits(draft, sample, vocab_size), spec)
    return torch.minimum(p.to(q.dtype), q).sum(-1).float().cpu()


def measure_acceptance(
    target: torch.nn.Module,
    draft: torch.nn.Module,
    samples: list[TargetSample],
    *,
    spec: SamplingSpec,
    vocab_size: int,
    progress: bool = False,
    desc: str = "acceptance",
) -> dict[str, PromptAcceptance]:
    """Per-prompt acceptance of `draft` against `target` along the given target samples (from
    `sample_target`): the same samples can be scored with a draft before and after mitigation,
    so the two are compared on identical paths."""
    from tqdm.auto import tqdm

    result: dict[str, PromptAcceptance] = {}
    for sample in tqdm(samples, desc=desc, unit="seq", disable=not progress, file=sys.stderr):
        entry = result.setdefault(sample.prompt_id, PromptAcceptance(sample.prompt_id, 0, 0.0))
        if not sample.continuation:
            continue
        betas = position_betas(target, draft, sample, spec, vocab_size)
        entry.positions += len(betas)
        entry.beta_sum += float(betas.sum())
        entry.per_sample.append(float(betas.mean()))
    return result


def pooled_alpha(acceptance: dict[str, PromptAcceptance], prompt_ids: list[str]) -> float:
    """Σ β / Σ positions over the given prompts (the token-weighted per-position acceptance)."""
    positions = sum(acceptance[p].positions for p in prompt_ids if p in acceptance)
    return sum(acceptance[p].beta_sum for p in prompt_ids if p in acceptance) / positions if positions else float("nan")


def acceptance_arrays(acceptance: dict[str, PromptAcceptance], prompt_ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(beta_sum, positions) arrays in the order of `prompt_ids`, for the prompt bootstrap."""
    return (
        np.array([acceptance[p].beta_sum for p in prompt_ids], dtype=float),
        np.array([acceptance[p].positions for p in prompt_ids], dtype=float),
    )
