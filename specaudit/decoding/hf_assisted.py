"""transformers' own assisted generation (`generate(..., assistant_model=draft)`), instrumented.

This is the implementation most people run, so specaudit audits it as it is. The draft length is
pinned (`num_assistant_tokens=k`, constant schedule, no confidence-based early stop) so that it
is comparable with our reference engine. Counters come from forward hooks on both models:
each target forward is one verification step, each draft forward proposes one token, and the
target's cache length at the next step tells how many tokens the previous step kept.
"""

from __future__ import annotations

import copy

import torch
from transformers.generation.streamers import BaseStreamer

from specaudit.decoding._generation import Generation
from specaudit.decoding.warping import SamplingSpec
from specaudit.models import NgramDraft, Stopwatch


class _FirstTokenClock(BaseStreamer):
    """generate() pushes the prompt first, then new tokens: the second push is the first token."""

    def __init__(self, clock: Stopwatch) -> None:
        self.clock, self.pushes, self.first_token_at = clock, 0, None

    def put(self, value: torch.Tensor) -> None:
        self.pushes += 1
        if self.pushes == 2:
            self.first_token_at = self.clock.now()

    def end(self) -> None:
        pass


class _Counters:
    def __init__(self) -> None:
        self.draft_forwards_since_verify = 0
        self.proposed_per_step: list[int] = []
        self.sequence_length_at_step: list[int] = []  # tokens in context before each verification
        self.candidates_per_step: list[list[int]] = []  # the drafts each verification was fed

    def on_draft(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        self.draft_forwards_since_verify += 1

    def on_target(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        positions = kwargs.get("position_ids")
        if positions is not None:  # absolute position of the first fed token = tokens already cached
            cached = int(positions.reshape(-1)[0])
        else:  # the cache keyword is `cache` in transformers 5, `past_key_values` before
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            cached = cache.get_seq_length() if cache is not None else 0
        keep = kwargs.get("logits_to_keep")
        proposed = int(keep) - 1 if isinstance(keep, int) and keep > 0 else self.draft_forwards_since_verify
        self.proposed_per_step.append(proposed)
        self.sequence_length_at_step.append(cached + ids.shape[1] - proposed)
        self.candidates_per_step.append(ids[0, ids.shape[1] - proposed :].tolist() if proposed > 0 else [])
        self.draft_forwards_since_verify = 0


def _request_features(spec: SamplingSpec) -> dict:
    """generate()'s own keywords for the request features it has (the registry refuses the rest):
    its repetition penalty is the reference's (prompt + output, before temperature) and its min-p
    comes after top-p, as in `warp`. Passed to the draft too, as generate() does since PR #28166."""
    out: dict = {}
    if spec.repetition_penalty != 1.0:
        out["repetition_penalty"] = spec.repetition_penalty
    if spec.min_p > 0.0 and not spec.greedy:
        out["min_p"] = spec.min_p
    return out


def _common_prefix(candidates: list[int], emitted: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(candidates, emitted)) if a != b), min(len(candidates), len(emitted)))


@torch.inference_mode()
def hf_assisted_generate(
    target: torch.nn.Module,
    draft: torch.nn.Module | NgramDraft,
    prompt_ids: list[int],
    *,
    spec: SamplingSpec,
    k: int,
    max_new_tokens: int,
    seed: int,
    eos_ids: set[int],
    pad_id: int | None = None,
) -> Generation:
    device = next(target.parameters()).device
    clock = Stopwatch(device)
    counters = _Counters()
    sampling = (
        {"do_sample": False}
        if spec.greedy
        else {"do_sample": True, "temperature": spec.temperature, "top_k": spec.top_k or None, "top_p": spec.top_p}
    )
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        eos_token_id=sorted(eos_ids),
        pad_token_id=pad_id if pad_id is not None else sorted(eos_ids)[0],
        **sampling,
        **_request_features(spec),
    )
    handles = [target.register_forward_pre_hook(counters.on_target, with_kwargs=True)]
    if isinstance(draft, NgramDraft):
        kwargs["prompt_lookup_num_tokens"] = k
        kwargs["max_matching_ngram_size"] = draft.max_ngram
    else:
        # Pin k: a constant schedule and no confidence-based early stop of the draft.
        draft.generation_config = copy.deepcopy(draft.generation_config)
        draft.generation_config.num_assistant_tokens = k
        draft.generation_config.num_assistant_tokens_schedule = "constant"
        draft.generation_config.assistant_confidence_threshold = 0.0
        kwargs["assistant_model"] = draft
        handles.append(draft.register_forward_pre_hook(counters.on_draft, with_kwargs=True))
    first_token = _FirstTokenClock(clock)
    torch.manual_seed(seed)  # generate() samples from the global generator
    try:
        start = clock.now()
        output = target.generate(
            torch.tensor([prompt_ids], device=device),
            attention_mask=torch.ones((1, len(prompt_ids)), dtype=torch.long, device=device),
            streamer=first_token,
            **kwargs,
        )
        wall = clock.now() - start
    finally:
        for handle in handles:
            handle.remove()
    tokens = output[0, len(prompt_ids) :].tolist()
    lengths = counters.sequence_length_at_step + [len(prompt_ids) + len(tokens)]
    emitted = [after - before for before, after in zip(lengths, lengths[1:])]
    # A step keeps the drafts its emitted tokens begin with. Not `emitted - 1`: a step that ends on
    # a kept end-of-sequence draft emits no token of the verifier's own after it (transformers
    # then lowers its n_matches by one and emits the candidate itself), found by the identity
    # check (docs/selftest.md, "The identity draft").
    accepted_per_step = [
        _common_prefix(candidates, tokens[before - len(prompt_ids) : before - len(prompt_ids) + n])
        for candidates, before, n in zip(counters.candidates_per_step, lengths, emitted)
    ]
    return Generation(
        tokens=tokens,
        finish_reason="eos" if tokens and tokens[-1] in eos_ids else "length",
        wall_s=wall,
        ttft_s=(first_token.first_token_at - start) if first_token.first_token_at else wall,
        steps=len(emitted),
        proposed=sum(counters.proposed_per_step),
        accepted=sum(accepted_per_step),
        accepted_per_step=accepted_per_step,
        proposed_per_step=list(counters.proposed_per_step),
    )
