"""Checks of a serving engine that no token test sees: its logprobs and its acceptance under load.

Both read sections that only runs against servers have (`logprob_parity` where a server returned
logprobs, `acceptance_stability` for runs at concurrency levels); a snapshot without them gets no
check, since the audit never asked the question.

- `logprob-parity` FAILs when the speculative server's logprobs are not the target's (the spec-OFF
  server's for the same prefix): whatever consumes them (evaluation harnesses, confidence filters)
  is given wrong numbers, even where the tokens are right (llama.cpp #27972).
- `acceptance-stability` WARNs when acceptance collapses under load or stops during the run: the
  output stays right, the speed-up is lost (TensorRT-LLM PR #16888, llama.cpp PR #27692).
- `prefix-cache` (runs with `--prefix-cache`): FAILs when a cache state's battery fails (the
  equivalence check fails too, naming the state); WARNs when a state was not what it was meant to
  be on some requests (a warm request that reused nothing, a cold one that reused tokens), when
  warm requests could not be shown warm (no cached-token count), or when a state was not judged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specaudit.contracts import CheckStatus, DisparityStatus
from specaudit.gate.results import GateCheck, section_check
from specaudit.gate.thresholds import FAIL, PASS, WARN

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import PrefixCacheSection, Snapshot


def serving_checks(snapshot: Snapshot) -> list[GateCheck]:
    checks = []
    parity = snapshot.logprob_parity
    if parity is not None:
        message = parity.message or f"{parity.differing} of {parity.positions} positions differ"
        shown = ("positions", "differing", "zero_logprob", "max_abs_diff", "threshold")
        checks.append(section_check("logprob-parity", "the server's logprobs are the target's", parity, message, shown))
    stability = snapshot.acceptance_stability
    if stability is not None:
        findings = stability.findings
        if findings:
            message = "; ".join(f.message for f in findings)
        else:  # not shown is not "holds": say how far down each level's interval reaches
            ratios = [
                f"level {level}: {r.estimate:.2f}x [{r.ci_low:.2f}, {r.ci_high:.2f}]"
                for level, entry in stability.levels.items()
                if (r := entry.ratio_to_lowest) is not None and r.ci_low is not None
            ]
            message = "no collapse under load and no stop during the run shown" + (
                f" (accepted drafts per token against the lowest level: {'; '.join(ratios)})" if ratios else ""
            )
        checks.append(
            GateCheck(
                "acceptance-stability",
                "speculation keeps working under load and over the run",
                WARN if stability.status == DisparityStatus.FLAG else PASS,
                message,
                {"levels": stability.levels, "findings": findings},
            )
        )
    cache = snapshot.prefix_cache
    if cache is not None:
        checks.append(_prefix_cache_check(cache))
    return checks


def _prefix_cache_check(cache: PrefixCacheSection) -> GateCheck:
    not_run = [
        state for state in cache.states if (battery := cache.equivalence.get(state)) is None or battery.status not in list(CheckStatus)
    ]
    if cache.failed_states:
        status = FAIL
    elif cache.warm_misses or cache.cold_hits or cache.unverified or not_run:
        status = WARN
    else:
        status = PASS
    per_state = "; ".join(
        f"{state}: {battery.status} ({sum(c['judged'] for c in cache.counts.get(state, {}).values())} records judged)"
        for state in cache.states
        if (battery := cache.equivalence.get(state)) is not None
    )
    message = cache.message or f"every request was in its cache state as meant; {per_state}"
    if not_run and not cache.failed_states:
        message += f"; not judged: {', '.join(not_run)}"
    return GateCheck(
        "prefix-cache",
        "the speculative server follows the target with the prompt's prefix cold and warm in its cache",
        status,
        message,
        {
            "states": cache.states,
            "failed_states": cache.failed_states,
            "warm_misses": cache.warm_misses,
            "cold_hits": cache.cold_hits,
            "unverified": cache.unverified,
        },
    )
