"""The snapshot's prefix-cache section: a run made with `--prefix-cache` (records carrying
`prefix_cache`, cold or warm, and `cached_prompt_tokens`, the prompt tokens the server reported
taking from its cache) is judged per cache state, as a run at several concurrency levels is judged
per level (analysis.concurrency, whose machinery this reuses).

- A record is judged in its state only where the server's count does not contradict it: a warm
  record that reused no prompt token was decoded cold (a miss), and a cold record that reused
  tokens was not cold (a server whose cache cannot be turned off per request); both are counted
  and left out of their state's battery, never pooled into it silently. A warm record whose
  server reports no count is judged as warm and counted as unverified.
- Equivalence per state: the whole battery (analysis.equivalence.equivalence_section) on each
  state's judged records, speculative against the target and the spec-OFF records of the same
  state as its control, at the state's share of alpha (`split_alpha`: the states are one family
  beside the pooled battery and the levels). A state that fails fails the run's equivalence,
  naming the state, even where the pooled battery passes: an engine that reuses a cached prefix
  (or its draft's state) wrongly is wrong on warm requests only.
- Per state, acceptance, latency and the paired speed-up over all prompts
  (analysis.concurrency.group_metrics).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specaudit.contracts.run import CACHED_TOKENS_FIELD, COLD, CONTROL_ENGINE, PREFIX_CACHE_FIELD, PREFIX_CACHE_STATES, WARM
from specaudit.contracts.snapshot import EngineEquivalence, EquivalenceSection, PrefixCacheSection
from specaudit.contracts.status import CheckStatus, EquivalenceStatus

if TYPE_CHECKING:
    from specaudit.analysis.equivalence import Battery


def states_of(records: list[dict]) -> list[str]:
    """The cache states the records carry, in PREFIX_CACHE_STATES order ([] for a run without the axis)."""
    present = {r.get(PREFIX_CACHE_FIELD) for r in records}
    return [state for state in PREFIX_CACHE_STATES if state in present]


def judged_in_state(record: dict) -> bool:
    """Whether the record counts as its state: not a warm record that reused nothing, not a cold
    one that reused tokens (None, no count reported, is taken at its word)."""
    reused = record.get(CACHED_TOKENS_FIELD)
    state = record.get(PREFIX_CACHE_FIELD)
    if state == WARM:
        return reused is None or reused > 0
    if state == COLD:
        return not reused
    return False


def _counts(records: list[dict]) -> dict[str, dict[str, int]]:
    by_engine: dict[str, dict[str, int]] = {}
    for r in records:
        entry = by_engine.setdefault(
            r["engine"], {"records": 0, "judged": 0, "tokens": 0, "reused_tokens": 0, "hits": 0, "misses": 0, "unreported": 0}
        )
        reused = r.get(CACHED_TOKENS_FIELD)
        entry["records"] += 1
        entry["judged"] += judged_in_state(r)
        entry["tokens"] += len(r.get("output_token_ids") or [])
        if reused is None:
            entry["unreported"] += 1
        else:
            entry["reused_tokens"] += reused
            entry["hits" if reused > 0 else "misses"] += 1
    return by_engine


def prefix_cache_section(records: list[dict], battery: Battery) -> PrefixCacheSection | None:
    """The section, or None for a run without --prefix-cache; `battery.alpha` is the run's."""
    from specaudit.analysis.concurrency import group_metrics, levels_of, split_alpha, subset_battery

    states = states_of(records)
    if not states:
        return None
    level_alpha = split_alpha(battery.alpha, levels_of(records), len(states)).state
    batteries: dict[str, EquivalenceSection] = {}
    counts, metrics = {}, {}
    failed, control_failed = [], []
    for state in states:
        subset = [r for r in records if r.get(PREFIX_CACHE_FIELD) == state]
        judged = [r for r in subset if judged_in_state(r)]
        counts[state] = _counts([r for r in subset if not r.get("timing_only")])
        metrics[state] = group_metrics(judged, n_boot=battery.n_boot, seed=battery.seed)
        if not battery.equivalence:
            continue
        if not any(r["engine"] != CONTROL_ENGINE and not r.get("timing_only") for r in judged):
            batteries[state] = EquivalenceSection(
                status=EquivalenceStatus.NOT_RUN, message=f"no {state} record of the speculative engine to judge", engines={}
            )
            continue
        batteries[state], outcome = subset_battery(judged, battery.at(level_alpha), keep_tests=True)
        if outcome == "control failed":
            control_failed.append(state)
        elif outcome == "failed":
            failed.append(state)
    timed = [r for r in records if not r.get("timing_only")]
    warm_misses = sum(1 for r in timed if r.get(PREFIX_CACHE_FIELD) == WARM and r.get(CACHED_TOKENS_FIELD) == 0)
    cold_hits = sum(1 for r in timed if r.get(PREFIX_CACHE_FIELD) == COLD and (r.get(CACHED_TOKENS_FIELD) or 0) > 0)
    unverified = sum(1 for r in timed if r.get(PREFIX_CACHE_FIELD) == WARM and r.get(CACHED_TOKENS_FIELD) is None)
    message = _message(states, failed, control_failed, warm_misses, cold_hits, unverified)
    return PrefixCacheSection(
        states=states,
        state_alpha=level_alpha,
        equivalence=batteries,
        counts=counts,
        metrics=metrics,
        warm_misses=warm_misses,
        cold_hits=cold_hits,
        unverified=unverified,
        failed_states=sorted({*failed, *control_failed}, key=states.index),
        control_failed_states=control_failed,
        **({"message": message} if message else {}),
    )


def _message(states: list[str], failed: list[str], control_failed: list[str], misses: int, hits: int, unverified: int) -> str | None:
    said = []
    if failed:
        said.append(
            f"equivalence fails on {', '.join(failed)} requests (of {', '.join(states)}): the speculative server's outputs do not "
            f"follow the target's distribution when the prompt's prefix is {' or '.join(failed)} in its cache"
        )
    if control_failed:
        said.append(
            f"the vanilla control fails on {', '.join(control_failed)} requests: the spec-OFF server's outputs do not follow the "
            "target's either, so the audit of that state cannot be trusted"
        )
    if misses:
        said.append(f"{misses} warm request(s) reused no prompt token from the server's cache: not warm, left out of the warm tests")
    if hits:
        said.append(f"{hits} cold request(s) reused prompt tokens from the server's cache: not cold, left out of the cold tests")
    if unverified:
        said.append(f"{unverified} warm request(s) came back without a count of cached prompt tokens: judged as warm, not shown to be")
    return "; ".join(said) or None


def smallest_holm_p(entry: EngineEquivalence | None) -> float | None:
    """The smallest Holm-adjusted p-value of an engine's goodness-of-fit and two-sample tests (None where neither ran)."""
    if entry is None:
        return None
    values = [
        row.holm_pvalue
        for part in (entry.goodness_of_fit, entry.two_sample)
        if part is not None
        for row in part.gate
        if row.holm_pvalue is not None
    ]
    return min(values) if values else None


def judge_by_state(equivalence: EquivalenceSection, section: PrefixCacheSection | None) -> EquivalenceSection:
    """The equivalence section judged by the prefix-cache section: a state whose battery fails
    fails the run's equivalence, naming the state, even where the pooled battery passed."""
    if section is None or not section.failed_states:
        return equivalence
    engines = dict(equivalence.engines)
    for state in section.failed_states:
        battery = section.equivalence.get(state)
        for name, entry in engines.items():
            at_state = battery.engines.get(name) if battery is not None else None
            if entry.verdict == CheckStatus.FAIL or at_state is None or at_state.verdict != CheckStatus.FAIL:
                continue
            engines[name] = entry.model_copy(
                update={"verdict": CheckStatus.FAIL, "status": at_state.status, "status_reason": section.message}
            )
    message = (
        f"{equivalence.message}; {section.message}" if equivalence.message and equivalence.status == CheckStatus.FAIL else section.message
    )
    update: dict[str, Any] = {"status": CheckStatus.FAIL, "failed_cache_states": section.failed_states, "message": message}
    return equivalence.model_copy(update={**update, "engines": engines})


__all__ = ["judge_by_state", "judged_in_state", "prefix_cache_section", "smallest_holm_p", "states_of"]
