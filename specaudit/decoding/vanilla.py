"""Plain autoregressive sampling from the target: the control every other engine is judged against."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from specaudit.decoding._generation import Generation, finish
from specaudit.decoding.verify import sample_from
from specaudit.decoding.warping import Prefix, SamplingSpec, warp
from specaudit.models import Stopwatch, forward_cached


class VanillaDecoding:
    """One plain decoding of one prompt, a token at a time (`step`), so that a server can
    interleave the steps of concurrent requests (specaudit.testing.batching); `vanilla_generate`
    runs it to the end. `result` is the Generation once `done`."""

    def __init__(
        self,
        model: torch.nn.Module,
        prompt_ids: list[int],
        *,
        spec: SamplingSpec,
        max_new_tokens: int,
        generator: torch.Generator,
        eos_ids: set[int],
        vocab_size: int,
    ) -> None:
        self.model, self.spec, self.generator = model, spec, generator
        self.max_new_tokens, self.eos_ids, self.vocab_size = max_new_tokens, eos_ids, vocab_size
        self.clock = Stopwatch(generator.device)
        self.start = self.clock.now()
        self.cache = DynamicCache(config=model.config)
        self.feed = torch.tensor([prompt_ids], device=generator.device)
        self.prompt = list(prompt_ids)
        self.tokens: list[int] = []
        self.ttft = 0.0
        self.step_s: list[float] = []
        self.result: Generation | None = None
        self.done = False

    @torch.inference_mode()
    def step(self, k: int | None = None) -> bool:
        """One forward pass and one sampled token (`k` is ignored: nothing is drafted); returns
        whether the decoding has ended."""
        clock = self.clock
        step_start = clock.now() if self.step_s else self.start
        logits = forward_cached(self.model, self.feed, self.cache)
        probs = warp(logits[0, -1, : self.vocab_size], self.spec, Prefix(self.prompt, self.tokens))
        token = sample_from(probs, self.generator)
        self.tokens.append(token)
        now = clock.now()
        self.step_s.append(now - step_start)
        if len(self.tokens) == 1:
            self.ttft = now - self.start
        self.tokens, reason = finish(self.tokens, self.eos_ids, self.max_new_tokens)
        self.feed = torch.tensor([[token]], device=self.generator.device)
        if reason is None:
            return False
        self.result = Generation(
            tokens=self.tokens,
            finish_reason=reason,
            wall_s=clock.now() - self.start,
            ttft_s=self.ttft,
            steps=len(self.tokens),
            verify_s=sum(self.step_s),
            step_s=self.step_s,
        )
        self.done = True
        return True


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
    decoding = VanillaDecoding(
        model, prompt_ids, spec=spec, max_new_tokens=max_new_tokens, generator=generator, eos_ids=eos_ids, vocab_size=vocab_size
    )
    while not decoding.step():
        pass
    return decoding.result
