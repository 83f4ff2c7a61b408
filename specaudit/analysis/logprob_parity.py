"""The snapshot's logprob parity section: are the logprobs a speculative server returns the
target's?

A server that returns a logprob for each emitted token (`server_logprobs` on a llama-server
record, `target_logprobs[t]["token_logprob"]` on an endpoint record) claims it is the target's log-probability of that token given the prefix. The spec-OFF
server's logprob for the same prefix is the reference: where a speculative record and its vanilla
pair (same prompt and sample) emitted the same tokens up to a position, the two logprobs there
must agree up to the numerics of batched evaluation. That noise is measured, not assumed: the
largest difference between vanilla records of the same prompt at two concurrency levels along
their common prefix (the same prefix, evaluated alone and in a batch). A position differs when the
gap exceeds twice that, and at least MIN_THRESHOLD.

A failure is its own finding ("the server's logprobs are not the target's"), apart from the
equivalence battery: llama-server runs are scored with llama.cpp's logits, not these, and an
endpoint run whose logprobs fail parity is scored locally instead (analysis.snapshot); a
speculative logprob of exactly 0.0 where the target's is well below is counted apart, the known
failure of servers that report drafted tokens as certain (llama.cpp #27972).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.contracts.snapshot import LogprobParitySection
from specaudit.contracts.status import CheckStatus, EquivalenceStatus
from specaudit.stats.equivalence.independence import common_prefix

MIN_THRESHOLD = 0.01  # nats: below this, float32 logits printed through JSON differ anyway
UNMEASURED_THRESHOLD = 0.1  # nats, used (and said) when no two vanilla records share a prefix


def emitted_logprobs(record: dict) -> list[float | None] | None:
    """The server's logprob of each emitted token, in either engine's field (None: none returned)."""
    if isinstance(record.get("server_logprobs"), list):
        return record["server_logprobs"]
    entries = record.get("target_logprobs")
    if isinstance(entries, list):
        return [entry.get("token_logprob") if isinstance(entry, dict) else None for entry in entries]
    return None


def _gaps(one: dict, other: dict) -> list[tuple[int, float | None, float | None]]:
    """(position, this logprob, the other's) along the two records' common output prefix."""
    a, b = emitted_logprobs(one), emitted_logprobs(other)
    if not isinstance(a, list) or not isinstance(b, list):
        return []
    n = min(common_prefix(one["output_token_ids"], other["output_token_ids"]), len(a), len(b))
    return [(t, a[t], b[t]) for t in range(n)]


def _difference(x: float | None, y: float | None) -> float:
    if x is None and y is None:
        return 0.0
    if x is None or y is None:
        return float("inf")  # one says zero probability, the other does not
    return abs(x - y)


def batch_noise(records: list[dict]) -> tuple[float | None, int]:
    """(largest |Δ logprob| between vanilla records of one prompt at two levels along their common
    prefix, positions compared); (None, 0) where no two such records share a prefix."""
    by_prompt: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        if r["engine"] == CONTROL_ENGINE and emitted_logprobs(r) is not None:
            by_prompt[r["prompt_id"]].append(r)
    largest, positions = None, 0
    for rows in by_prompt.values():
        for i, one in enumerate(rows):
            for other in rows[i + 1 :]:
                if one.get("concurrency") == other.get("concurrency"):
                    continue
                for _, x, y in _gaps(one, other):
                    gap = _difference(x, y)
                    if gap != float("inf"):
                        largest = gap if largest is None else max(largest, gap)
                        positions += 1
    return largest, positions


def logprob_parity(records: list[dict]) -> LogprobParitySection | None:
    """The section, or None when no record carries server logprobs."""
    outputs = [r for r in records if not r.get("timing_only")]
    if not any(emitted_logprobs(r) is not None for r in outputs):
        return None
    noise, noise_positions = batch_noise(outputs)
    threshold = max(2 * noise, MIN_THRESHOLD) if noise is not None else UNMEASURED_THRESHOLD
    # the vanilla pair of each (prompt, sample) that returned logprobs, by level: a speculative record
    # is compared with vanilla's at its own level where that one returned them (an engine may return
    # them at some levels only), else at another level
    control: dict[tuple, dict] = defaultdict(dict)
    for r in outputs:
        if r["engine"] == CONTROL_ENGINE and emitted_logprobs(r) is not None:
            control[(r["prompt_id"], r["sample"])][r.get("concurrency")] = r
    compared = differing = zero = 0
    largest = 0.0
    by_level: dict[str, dict[str, int]] = {}
    examples = []
    for r in outputs:
        pairs = control.get((r["prompt_id"], r["sample"]))
        if r["engine"] != SPECULATIVE_ENGINE or not pairs or emitted_logprobs(r) is None:
            continue
        level = by_level.setdefault(str(r.get("concurrency")), {"positions": 0, "differing": 0})
        for position, spec, target in _gaps(r, pairs.get(r.get("concurrency")) or next(iter(pairs.values()))):
            gap = _difference(spec, target)
            compared += 1
            level["positions"] += 1
            largest = max(largest, gap)
            if gap > threshold:
                differing += 1
                level["differing"] += 1
                if spec == 0.0:
                    zero += 1
                if len(examples) < 5:
                    examples.append({"record": r["key"], "position": position, "speculative": spec, "vanilla": target})
    notes: dict[str, Any] = {}  # what the figures need said beside them
    if noise is None:
        notes["note"] = (
            f"no two vanilla records of one prompt at two levels share a prefix: threshold {UNMEASURED_THRESHOLD} nats, not measured"
        )
    status = CheckStatus.FAIL if differing else CheckStatus.PASS
    if not compared:
        status = EquivalenceStatus.NOT_RUN
        notes["message"] = "no speculative record shares an output prefix with its vanilla pair: nothing to compare"
    elif differing:
        notes["message"] = (
            f"the server's logprobs are not the target's: {differing} of {compared} positions differ from the spec-OFF "
            f"server's for the same prefix by more than {threshold:.3g} nats (largest {largest:.3g})"
            + (f"; {zero} of them are exactly 0.0 (a drafted token reported as certain)" if zero else "")
        )
    return LogprobParitySection(
        status=status,
        positions=compared,
        differing=differing,
        zero_logprob=zero,
        max_abs_diff=largest if compared else None,
        threshold=threshold,
        batch_noise={"max_abs_diff": noise, "positions": noise_positions},
        by_concurrency=by_level,
        examples=examples,
        **notes,
    )


__all__ = ["batch_noise", "emitted_logprobs", "logprob_parity"]
