"""The ONE warping implementation every engine, the scoring and the screen use: request features
(logit bias, penalties, a grammar's mask), then temperature, top-k, top-p and min-p.

Target and draft distributions go through the same function with the same `SamplingSpec`, so a
"warper applied to one side only" bug cannot come from this package itself. Order and tie rules
follow transformers' logits processors (temperature, then top-k keeping ties at the boundary,
then top-p keeping the smallest prefix whose mass reaches top_p, then min-p), so our engines and
transformers' assisted generation warp identically. Logit bias and penalties act on the raw
logits first, as vLLM and llama.cpp apply them (docs/request-features.md states each mapping).

Penalties make the distribution at a position depend on the tokens before it, so `warp` takes
that prefix (`Prefix`). Rows of a [n, V] block are consecutive positions: the last row's prefix
is the whole `Prefix`, each earlier row's is one token shorter. The counts for all rows are made
at once (one scatter over an index matrix), never in a Python loop over positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specaudit.decoding._spec import SamplingSpec


@dataclass(frozen=True)
class Prefix:
    """The tokens before the LAST row of a block of logits: the prompt and the output so far."""

    prompt: Sequence[int]
    output: Sequence[int]


def _counts(sequence: torch.Tensor, lows: torch.Tensor, ends: torch.Tensor, vocab: int, dtype: torch.dtype) -> torch.Tensor:
    """[n, V]: how often each token occurs in sequence[lows[i]:ends[i]], for every row i."""
    counts = torch.zeros((ends.shape[0], vocab), dtype=dtype, device=sequence.device)
    width = int((ends - lows).max()) if ends.numel() else 0
    if width <= 0 or sequence.numel() == 0:
        return counts
    index = lows[:, None] + torch.arange(width, device=sequence.device)[None, :]
    raw = sequence[index.clamp(max=sequence.numel() - 1)]
    valid = (index < ends[:, None]) & (raw >= 0) & (raw < vocab)  # ids past the logits' width are never counted
    tokens = torch.where(valid, raw, torch.zeros_like(raw))
    return counts.scatter_add_(1, tokens, valid.to(dtype))


def penalise(logits: torch.Tensor, spec: SamplingSpec, prefix: Prefix) -> torch.Tensor:
    """Apply the spec's penalties to logits [n, V] whose last row follows `prefix` (a new tensor).

    Repetition (transformers / vLLM / llama.cpp alike): a seen token's logit is divided by the
    penalty when positive and multiplied when not. Presence and frequency (OpenAI / vLLM):
    subtract presence once and frequency per occurrence. Scopes: repetition over prompt + output,
    presence and frequency over the output only; with `repeat_last_n` = N all three over the last
    N tokens of prompt + output (llama.cpp's penalties sampler)."""
    n, vocab = logits.shape[-2], logits.shape[-1]
    device = logits.device
    prompt = torch.as_tensor(list(prefix.prompt), dtype=torch.long, device=device)
    output = torch.as_tensor(list(prefix.output), dtype=torch.long, device=device)
    if output.numel() < n - 1:
        raise ValueError(f"a block of {n} positions needs at least {n - 1} output tokens in its prefix, got {output.numel()}")
    sequence = torch.cat([prompt, output])
    # End (exclusive) of each row's prefix in `sequence`: the last row sees all of it.
    ends = sequence.numel() - (n - 1) + torch.arange(n, device=device)
    everything = torch.zeros_like(ends)
    if spec.repeat_last_n:
        window = (ends - spec.repeat_last_n).clamp_min(0)
        seen = output_counts = _counts(sequence, window, ends, vocab, logits.dtype)
    else:
        seen = _counts(sequence, everything, ends, vocab, logits.dtype) if spec.repetition_penalty != 1.0 else None
        output_start = torch.full_like(ends, prompt.numel())
        frequency = spec.presence_penalty != 0.0 or spec.frequency_penalty != 0.0
        output_counts = _counts(sequence, output_start, ends, vocab, logits.dtype) if frequency else None
    out = logits.clone()
    if spec.repetition_penalty != 1.0 and seen is not None:
        scaled = torch.where(out > 0, out / spec.repetition_penalty, out * spec.repetition_penalty)
        out = torch.where(seen > 0, scaled, out)
    if output_counts is not None:
        out = out - spec.frequency_penalty * output_counts - spec.presence_penalty * (output_counts > 0).to(out.dtype)
    return out


def process_logits(logits: torch.Tensor, spec: SamplingSpec, prefix: Prefix | Sequence[Prefix] | None = None) -> torch.Tensor:
    """The request features applied to raw logits [..., V]: logit bias, then penalties, then a
    grammar's mask (decoding.grammar).

    `prefix`: one `Prefix` (rows of the last-but-one dimension are consecutive positions), or one
    per leading batch row (logits [B, V] or [B, n, V]). Needed only when the spec penalises or
    has a grammar."""
    if spec.logit_bias:
        logits = logits.clone()
        vocab = logits.shape[-1]
        for token, bias in spec.logit_bias:
            if token < vocab:
                logits[..., token] += bias
    if not spec.path_dependent:
        return logits
    if prefix is None:
        raise ValueError("penalties and grammars depend on the tokens before each position: pass prefix=")
    if isinstance(prefix, Prefix):
        block = logits if logits.dim() >= 2 else logits[None]
        return _along_path(block, spec, prefix).reshape(logits.shape)
    if len(prefix) != logits.shape[0]:
        raise ValueError(f"{len(prefix)} prefixes for {logits.shape[0]} batch rows")
    return torch.stack([_along_path(row if row.dim() == 2 else row[None], spec, p).reshape(row.shape) for row, p in zip(logits, prefix)])


def _along_path(block: torch.Tensor, spec: SamplingSpec, prefix: Prefix) -> torch.Tensor:
    """Penalties, then the grammar's mask (tokens it does not allow get -inf), on a block [n, V]."""
    out = penalise(block, spec, prefix) if spec.penalised else block
    if spec.grammar:
        from specaudit.decoding.grammar import grammar_mask

        allowed = grammar_mask(spec.grammar, prefix.output, out.shape[-2], out.shape[-1], out.device)
        out = out.masked_fill(~allowed, float("-inf"))
    return out


def warp(logits: torch.Tensor, spec: SamplingSpec, prefix: Prefix | Sequence[Prefix] | None = None) -> torch.Tensor:
    """Map logits [..., V] to the warped probability distribution [..., V] (float32, or float64
    when given float64). `prefix` is the tokens before the positions (see `process_logits`);
    only a spec with penalties or a grammar needs it.

    Greedy gives a one-hot distribution on the argmax of the processed logits (first index on
    exact ties, as torch.argmax).
    """
    logits = logits if logits.dtype == torch.float64 else logits.float()
    logits = process_logits(logits, spec, prefix)
    if spec.greedy:
        probs = torch.zeros_like(logits)
        return probs.scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
    scores = logits / spec.temperature
    if spec.top_k and spec.top_k < scores.shape[-1]:
        kth = torch.topk(scores, spec.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if spec.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        sorted_probs = sorted_scores.softmax(dim=-1)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop_sorted = mass_before >= spec.top_p
        drop_sorted[..., 0] = False  # always keep the most likely token
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    probs = scores.softmax(dim=-1)
    if spec.min_p > 0.0:
        # p >= min_p * max p on the distribution so far; the most likely token always stays.
        keep = probs >= spec.min_p * probs.max(dim=-1, keepdim=True).values
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs
