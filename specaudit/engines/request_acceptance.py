"""Per-request acceptance as a server reports it in its own response body.

A server that says, per request, how many draft tokens it proposed and how many it kept lets an
endpoint audit measure acceptance per prompt group (the disparity analysis), not only the
server-wide Prometheus deltas of spec_counters. Three shapes are read:

- llama.cpp's llama-server: `timings.draft_n` / `timings.draft_n_accepted` on `/completion` and
  `/v1/completions` (tools/server/server-common.cpp, `server_slot_stats::to_json`, in the llama.cpp
  that llama-cpp-python 0.3.36 vendors); both are absent when the request drafted nothing.
- vLLM with `--per-request-spec-decode-metrics summary|detailed` (vLLM PR #48915; the response
  shape as quoted in mostlygeek/llama-swap issue #1032): `metrics.speculative_decoding` with
  `num_draft_tokens`, `num_accepted_draft_tokens`, `num_spec_steps`, `acceptance_histogram`,
  `draft_acceptance_rate`, `mean_acceptance_length`.
- SGLang's `/generate` (python/sglang/srt/managers/tokenizer_manager.py,
  `_calculate_spec_decoding_metrics`): `meta_info.spec_verify_ct`, `spec_accept_rate`,
  `spec_accept_length`, with the counts under names that changed between releases:
  `spec_accept_token_num` / `spec_draft_token_num`, later `spec_accepted_drafts` /
  `spec_proposed_drafts`, later `spec_num_correct_drafts` / `spec_num_proposed_drafts`.

A parser returns None when the body carries no such field (the server does not report it, or
speculation was off), and raises InputError on a field that is there but impossible (accepted >
proposed, a negative count): a server reporting nonsense is a finding, not missing data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from specaudit.errors import InputError

# SGLang's (accepted, proposed) count names, newest first.
SGLANG_COUNT_NAMES = (
    ("spec_num_correct_drafts", "spec_num_proposed_drafts"),
    ("spec_accepted_drafts", "spec_proposed_drafts"),
    ("spec_accept_token_num", "spec_draft_token_num"),
)


@dataclass(frozen=True)
class RequestAcceptance:
    """What one response says about its own speculation. `proposed` / `accepted` are draft tokens
    (None where the server gives only a rate); `steps` target passes (verification steps) where it
    says; `drafted_steps` the steps that proposed drafts, where that is all it says (vLLM's
    `num_spec_steps` leaves out the prompt's pass and every step whose draft was empty, so it is not
    the target's passes, and a record's `steps` stays unobserved)."""

    source: str  # which field it came from, e.g. "timings.draft_n"
    proposed: int | None
    accepted: int | None
    steps: int | None = None
    rate: float | None = None  # the server's own accepted / proposed, where it reports one
    histogram: list[int] | None = None  # steps that accepted 0, 1, 2, ... drafts (vLLM)
    drafted_steps: int | None = None

    @property
    def acceptance_rate(self) -> float | None:
        if self.proposed:
            return self.accepted / self.proposed
        return self.rate

    def to_dict(self) -> dict:
        return {
            key: value
            for key, value in {
                "source": self.source,
                "proposed": self.proposed,
                "accepted": self.accepted,
                "steps": self.steps,
                "rate": self.rate,
                "histogram": self.histogram,
                "drafted_steps": self.drafted_steps,
            }.items()
            if value is not None
        }


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 or value != int(value):
        raise InputError(f"the server's {where} is {value!r}, not a count (an integer >= 0)")
    return int(value)


def _rate(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InputError(f"the server's {where} is {value!r}, not a rate in [0, 1]")
    return float(value)


def _checked(acceptance: RequestAcceptance) -> RequestAcceptance:
    if acceptance.proposed is not None and acceptance.accepted is not None and acceptance.accepted > acceptance.proposed:
        raise InputError(
            f"the server's {acceptance.source} says {acceptance.accepted} draft tokens were accepted of "
            f"{acceptance.proposed} proposed; a server cannot accept more drafts than it proposed"
        )
    return acceptance


def llama_server_acceptance(body: dict) -> RequestAcceptance | None:
    """llama-server's `timings.draft_n` / `timings.draft_n_accepted` (absent: nothing drafted)."""
    timings = body.get("timings") if isinstance(body, dict) else None
    if not isinstance(timings, dict) or "draft_n" not in timings:
        return None
    proposed = _count(timings["draft_n"], "timings.draft_n")
    accepted = _count(timings.get("draft_n_accepted", 0), "timings.draft_n_accepted")
    return _checked(RequestAcceptance("timings.draft_n", proposed, accepted))


def vllm_acceptance(body: dict) -> RequestAcceptance | None:
    """vLLM's `metrics.speculative_decoding` (--per-request-spec-decode-metrics)."""
    metrics = body.get("metrics") if isinstance(body, dict) else None
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if not isinstance(spec, dict):
        return None
    where = "metrics.speculative_decoding"
    proposed = _count(spec.get("num_draft_tokens"), f"{where}.num_draft_tokens")
    accepted = _count(spec.get("num_accepted_draft_tokens"), f"{where}.num_accepted_draft_tokens")
    drafted = _count(spec["num_spec_steps"], f"{where}.num_spec_steps") if "num_spec_steps" in spec else None
    histogram = spec.get("acceptance_histogram")
    if histogram is not None:
        histogram = [_count(h, f"{where}.acceptance_histogram") for h in histogram] if isinstance(histogram, list) else None
        if histogram is not None and drafted is not None and sum(histogram) != drafted:
            raise InputError(f"the server's {where}.acceptance_histogram counts {sum(histogram)} steps, its num_spec_steps {drafted}")
        if histogram is not None and sum(i * h for i, h in enumerate(histogram)) != accepted:
            raise InputError(
                f"the server's {where}.acceptance_histogram adds up to {sum(i * h for i, h in enumerate(histogram))} "
                f"accepted drafts, its num_accepted_draft_tokens {accepted}"
            )
    rate = _rate(spec.get("draft_acceptance_rate"), f"{where}.draft_acceptance_rate")
    return _checked(RequestAcceptance(where, proposed, accepted, rate=rate, histogram=histogram, drafted_steps=drafted))


def sglang_acceptance(body: dict) -> RequestAcceptance | None:
    """SGLang's `meta_info` speculative fields (counts where the release names them, else the rate)."""
    meta = body.get("meta_info") if isinstance(body, dict) else None
    if not isinstance(meta, dict) or not any(key.startswith("spec_") for key in meta):
        return None
    steps = _count(meta["spec_verify_ct"], "meta_info.spec_verify_ct") if "spec_verify_ct" in meta else None
    rate = _rate(meta.get("spec_accept_rate"), "meta_info.spec_accept_rate")
    for accepted_name, proposed_name in SGLANG_COUNT_NAMES:
        if proposed_name in meta:
            proposed = _count(meta[proposed_name], f"meta_info.{proposed_name}")
            accepted = _count(meta.get(accepted_name, 0), f"meta_info.{accepted_name}")
            return _checked(RequestAcceptance(f"meta_info.{proposed_name}", proposed, accepted, steps=steps, rate=rate))
    if rate is None and steps is None:
        return None
    return RequestAcceptance("meta_info.spec_accept_rate", None, None, steps=steps, rate=rate)


PARSERS = (llama_server_acceptance, vllm_acceptance, sglang_acceptance)


def request_acceptance(body: dict) -> RequestAcceptance | None:
    """The first of the known shapes that `body` carries, or None."""
    for parse in PARSERS:
        found = parse(body)
        if found is not None:
            return found
    return None


__all__ = ["RequestAcceptance", "llama_server_acceptance", "request_acceptance", "sglang_acceptance", "vllm_acceptance"]
