"""Plain autoregressive sampling from the target: the control every other engine is judged against."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from specaudit.decoding._generation import Generation, finish
from specaudit.decoding.verify import sample_from
from specaudit.decoding.warping import SamplingSpec, warp
from specaudit.models import Stopwatch, forward_cached


@torch.inference_mode()
def vanilla_generate(
    model: torch.nn.Module,
    prompt_ids: list[int],
    *,
    spec: SamplingSpec,
    max_new_tokens: int,
    generator: torch.Generator,
    eos_ids: set[int],
    vocab_size: int,
) -> Generation:
    device = generator.device
    clock = Stopwatch(device)
    start = clock.now()
    cache = DynamicCache(config=model.config)
    feed = torch.tensor([prompt_ids], device=device)
    tokens: list[int] = []
    ttft = 0.0
    step_s: list[float] = []
    reason = None
    while reason is None:
        step_start = clock.now() if step_s else start
        logits = forward_cached(model, feed, cache)
        token = sample_from(warp(logits[0, -1, :vocab_size], spec), generator)
        tokens.append(token)
        now = clock.now()
        step_s.append(now - step_start)
        if len(tokens) == 1:
            ttft = now - start
        tokens, reason = finish(tokens, eos_ids, max_new_tokens)
        feed = torch.tensor([[token]], device=device)
    return Generation(
        tokens=tokens,
        finish_reason=reason,
        wall_s=clock.now() - start,
        ttft_s=ttft,
        steps=len(tokens),
        verify_s=sum(step_s),
        step_s=step_s,
    )
