"""What one decoding of one prompt produced, for every engine alike."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Generation:
    tokens: list[int]
    finish_reason: str  # "eos", "length", "stop" (a stop string), or "verify_error" (stopped at a verify call it could not use)
    wall_s: float
    ttft_s: float  # time to first token
    steps: int  # verification steps (vanilla: forward passes)
    proposed: int = 0  # drafted tokens offered to the target
    accepted: int = 0  # drafted tokens the target kept
    accepted_per_step: list[int] = field(default_factory=list)
    proposed_per_step: list[int] = field(default_factory=list)  # < k near the length budget
    beta: list[list[float]] = field(default_factory=list)  # Σ min(p, q) per drafted position
    accept_prob: list[list[float]] = field(default_factory=list)  # min(1, p(x)/q(x)) of each drafted token x
    # [F(x−), f(x)] per emitted token under the law its role in the step implies (verify.step_pit)
    step_pit: list[list[float]] = field(default_factory=list)
    draft_s: float = 0.0
    verify_s: float = 0.0
    step_s: list[float] = field(default_factory=list)
    # Calls where a verify function broke its contract (verify.contract_problem): {"call", "position",
    # "problem"}. A proven bug of that sampler: analyze fails the engine on any.
    verify_violations: list[dict] = field(default_factory=list)
    # an engine's own fields (a tree's nodes per step, a staged run's per-level counts): the record's extra
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def finish(tokens: list[int], eos_ids: set[int], max_new_tokens: int) -> tuple[list[int], str | None]:
    """Cut `tokens` after the first end-of-sequence token or at the length budget; say why it ended."""
    for index, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[: index + 1], "eos"
    if len(tokens) >= max_new_tokens:
        return tokens[:max_new_tokens], "length"
    return tokens, None


def record_step(
    result: Generation, proposed: int, accepted: int, started: float, drafted: float, verified: float, decoding_start: float
) -> None:
    """Count one draft-and-verify step: its proposed and accepted tokens and its draft, verify and
    step times (clock readings: the step's start, drafting done, verification done)."""
    result.steps += 1
    result.proposed += proposed
    result.accepted += accepted
    result.accepted_per_step.append(accepted)
    result.proposed_per_step.append(proposed)
    result.draft_s += drafted - started
    result.verify_s += verified - drafted
    result.step_s.append(verified - started)
    if not result.tokens:
        result.ttft_s = verified - decoding_start


def end_step(result: Generation, context: list[int], emitted: list[int], eos_ids: set[int], max_new_tokens: int) -> str | None:
    """Append a step's emitted tokens to the context and the output, cut the output (and its step
    PIT rows) after an end-of-sequence token or at the length budget; why the decoding ended, or None."""
    context.extend(emitted)
    result.tokens.extend(emitted)
    kept, reason = finish(result.tokens, eos_ids, max_new_tokens)
    del result.tokens[len(kept) :]
    del result.step_pit[len(kept) :]
    return reason
