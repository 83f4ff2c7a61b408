"""Server-wide speculative-decoding counters in vLLM's Prometheus names (`vllm:spec_decode_*`),
read by the endpoint engine from a server's /metrics page and by the vLLM engine from its own
stats: parsing a page, and the deltas over a run."""

from __future__ import annotations

from specaudit.errors import InputError

SPEC_DECODE_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens")
PER_POSITION_COUNTER = "vllm:spec_decode_num_accepted_tokens_per_pos"


def parse_metrics(text: str) -> dict:
    """Speculative-decoding counters of a Prometheus text page (prometheus_client's parser),
    summed over label sets: the three totals (with or without the `_total` suffix
    prometheus_client adds) and accepted tokens per draft position."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    per_position: dict[int, float] = {}
    try:
        samples = [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    except (ValueError, TypeError, IndexError) as err:
        raise InputError(f"endpoint metrics_url did not return Prometheus text ({err}); point it at the server's /metrics") from None
    for sample in samples:
        base = sample.name.removesuffix("_total")
        if base == PER_POSITION_COUNTER:
            position = str(sample.labels.get("position", ""))
            if position.isdigit():
                per_position[int(position)] = per_position.get(int(position), 0.0) + sample.value
        elif base in SPEC_DECODE_COUNTERS:
            totals[base] = totals.get(base, 0.0) + sample.value
    if per_position:
        totals["per_position"] = [per_position.get(i, 0.0) for i in range(max(per_position) + 1)]
    return totals


def metrics_summary(before: dict, after: dict, previous: dict | None = None) -> dict:
    """Counter deltas over this invocation, added to those of earlier invocations of the run."""
    counters = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in SPEC_DECODE_COUNTERS if name in after}
    width = max(len(after.get("per_position", [])), len((previous or {}).get("accepted_per_position") or []))
    after_pos, before_pos = after.get("per_position", []), before.get("per_position", [])
    per_position = [(after_pos[i] if i < len(after_pos) else 0.0) - (before_pos[i] if i < len(before_pos) else 0.0) for i in range(width)]
    if previous:
        for name, value in (previous.get("counters") or {}).items():
            counters[name] = counters.get(name, 0.0) + value
        old = previous.get("accepted_per_position") or []
        per_position = [v + (old[i] if i < len(old) else 0.0) for i, v in enumerate(per_position)]
    drafts = counters.get("vllm:spec_decode_num_drafts", 0.0)
    drafted = counters.get("vllm:spec_decode_num_draft_tokens", 0.0)
    accepted = counters.get("vllm:spec_decode_num_accepted_tokens", 0.0)
    return {
        "counters": counters,
        "accepted_per_position": per_position,
        "acceptance_rate": accepted / drafted if drafted else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "per_position_acceptance_rate": [v / drafts for v in per_position] if drafts else [],
        "invocations": (previous or {}).get("invocations", 0) + 1,
    }
