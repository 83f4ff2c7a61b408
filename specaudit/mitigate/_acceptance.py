"""Per-prompt acceptance of a (target, draft) pair, measured along the target's own samples.

This is the one place the mitigation measures acceptance; training, the policies and the
re-audit all call `measure_acceptance`. The measurement itself is the screen's
(specaudit.engines.batched_sampling, docs/screen.md): `sample_batch` draws the target's samples (and keeps the
warped p along them), `teacher_forced_probs` gives a draft's q along the same paths in one pass
per batch, `position_acceptance` gives β_t = Σ_v min(p_t, q_t) and the conditional acceptance
of each sampled token, and `model_draft_acceptance` the speculative counts (steps, proposed,
accepted) expected along a path at draft length k. The mean of β over positions of target
samples estimates the per-position acceptance α of the decoding the target would do.

The batches are kept with their samples, so every later draft (before, after, each weighting)
is scored on identical paths and positions without another target pass.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field

import numpy as np
import torch

from specaudit.decoding import SamplingSpec
from specaudit.engines.batched_sampling import SampledBatch, sample_batch, teacher_forced_probs
from specaudit.stats.acceptance import expected_counts, position_acceptance


@dataclass
class TargetSample:
    """One sampled continuation of one prompt (ids of the prompt and of the new tokens)."""

    prompt_id: str
    prompt_ids: list[int]
    continuation: list[int]
    # The target's warped distributions at the continuation positions [n, V] (float32, a normal
    # tensor: training reads it under autograd, which inference tensors forbid).
    target_probs: torch.Tensor | None = field(default=None, repr=False)
    batch: SampledBatch | None = field(default=None, repr=False)  # the screen batch it was drawn in (without its p)
    row: int = 0  # its row in `batch`
    budget: int = 0  # the max_new_tokens it was drawn with (the engine drafts no further)


@dataclass
class PromptAcceptance:
    """One prompt's samples: β summed over their positions (α = beta_sum / positions) and the
    speculative counts expected along them at draft length k (the screen's dynamic programme)."""

    prompt_id: str
    positions: int
    beta_sum: float
    per_sample: list[float] = field(default_factory=list)  # mean β of each sample
    steps: float = 0.0
    proposed: float = 0.0
    accepted: float = 0.0

    @property
    def alpha(self) -> float:
        return self.beta_sum / self.positions if self.positions else float("nan")

    def predicted_speedup(self, cost_ratio: float) -> float:
        """Plain time per token over speculative time per token: tokens / (steps + c · proposed),
        one target call per step and one draft call (c target calls) per proposed token."""
        cost = self.steps + cost_ratio * self.proposed
        return self.positions / cost if cost else float("nan")


def sample_target(
    target: torch.nn.Module,
    prompts: dict[str, list[int]],
    *,
    spec: SamplingSpec,
    samples: int,
    max_new_tokens: int,
    eos_ids: set[int],
    vocab_size: int,
    pad_id: int,
    seed: int = 0,
    batch_size: int = 16,
    progress: bool = False,
) -> list[TargetSample]:
    """`samples` continuations of each prompt from the target (the screen's batched sampler,
    seeded per (prompt, sample) like the runner), each with the target's p along it."""
    from tqdm.auto import tqdm

    from specaudit.execution.plan import derive_seed

    jobs = [(pid, ids, s) for pid, ids in prompts.items() for s in range(samples)]
    jobs.sort(key=lambda job: len(job[1]))  # similar lengths together: less padding
    out: list[TargetSample] = []
    with tqdm(total=len(jobs), desc="target samples", unit="seq", disable=not progress, file=sys.stderr) as bar:
        for start in range(0, len(jobs), batch_size):
            chunk = jobs[start : start + batch_size]
            batch = sample_batch(
                target,
                [ids for _, ids, _ in chunk],
                [derive_seed(seed, pid, s) for pid, _, s in chunk],
                spec=spec,
                max_new_tokens=max_new_tokens,
                eos_ids=eos_ids,
                vocab_size=vocab_size,
                pad_id=pad_id,
                keep_probs=True,
            )
            kept = dataclasses.replace(batch, probs=None)  # each sample holds its own rows of p
            for row, ((pid, ids, _), tokens) in enumerate(zip(chunk, batch.tokens, strict=True)):
                p = batch.probs[row, : len(tokens)].float().clone()  # a clone outside inference mode is a normal tensor
                out.append(TargetSample(pid, list(ids), list(tokens), p, kept, row, max_new_tokens))
            bar.update(len(chunk))
    order = {pid: i for i, pid in enumerate(prompts)}
    out.sort(key=lambda s: order[s.prompt_id])
    return out


@torch.no_grad()
def measure_acceptance(
    draft: torch.nn.Module,
    samples: list[TargetSample],
    *,
    spec: SamplingSpec,
    vocab_size: int,
    k: int = 4,
    progress: bool = False,
    desc: str = "acceptance",
) -> dict[str, PromptAcceptance]:
    """Per-prompt acceptance of `draft` along the given target samples (from `sample_target`):
    the same samples can be scored with a draft before and after mitigation, so the two are
    compared on identical paths. One teacher-forced draft pass per sampling batch."""
    from tqdm.auto import tqdm

    by_batch: dict[int, list[TargetSample]] = {}
    for sample in samples:
        if sample.batch is None or sample.target_probs is None:
            raise ValueError(f"sample of {sample.prompt_id} was not drawn by sample_target (no batch or target p)")
        by_batch.setdefault(id(sample.batch), []).append(sample)
    result = {s.prompt_id: PromptAcceptance(s.prompt_id, 0, 0.0) for s in samples}
    for members in tqdm(list(by_batch.values()), desc=desc, unit="batch", disable=not progress, file=sys.stderr):
        q = teacher_forced_probs(draft, members[0].batch, spec=spec, vocab_size=vocab_size)
        for sample in members:
            n = len(sample.continuation)
            if not n:
                continue
            p = sample.target_probs
            tokens = torch.tensor(sample.continuation, dtype=torch.long, device=q.device)
            beta, accept = position_acceptance(p.to(q.device), q[sample.row, :n], tokens)
            steps, proposed, accepted, _ = expected_counts(accept.tolist(), k, sample.budget)
            entry = result[sample.prompt_id]
            entry.positions += n
            entry.beta_sum += float(beta.sum())
            entry.per_sample.append(float(beta.mean()))
            entry.steps += steps
            entry.proposed += proposed
            entry.accepted += accepted
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


def cost_arrays(acceptance: dict[str, PromptAcceptance], prompt_ids: list[str], cost_ratio: float) -> np.ndarray:
    """Per prompt, the speculative time in target-call units (steps + c · proposed), aligned with
    `acceptance_arrays`' positions: Σ positions / Σ cost is the group's predicted speed-up."""
    return np.array([acceptance[p].steps + cost_ratio * acceptance[p].proposed for p in prompt_ids], dtype=float)
