"""The self-test's server part: each server mutant (specaudit.testing.server_mutants) is served by
two ReferenceServers (spec-OFF correct, spec-ON with the bug) on 127.0.0.1, audited by the endpoint
engine at concurrency levels 1 and 4 and the same `analyze` a user runs; the audit must catch it
and name its cause, and must pass the correct server at the stated false-alarm rate.

What names a cause, per snapshot (`findings`):
- equivalence: the battery (pooled or at a level) fails the speculative engine;
- equivalence:STATE: with --prefix-cache, the battery on that cache state's records (cold, warm)
  fails the speculative engine;
- independence: the concurrency section's independence test fails it at a level;
- logprob_parity: the logprob parity section is FAIL;
- acceptance_stopped / acceptance_collapse: the acceptance stability section's findings;
- invariant:CHECK: the output invariants section counts a violation of CHECK (e.g. after-stop).
A mutant is caught in an audit when the finding its `caught_by` names is there; the correct
server's audit is a false alarm when any finding is.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable
from dataclasses import fields
from typing import TYPE_CHECKING

import pandas as pd
from scipy import stats

from specaudit.config import RunConfig
from specaudit.contracts.run import SPECULATIVE_ENGINE
from specaudit.contracts.status import CheckStatus, DisparityStatus
from specaudit.decoding._grammar_source import grammar_available
from specaudit.decoding._spec import SamplingSpec
from specaudit.decoding.settings import setting_label
from specaudit.errors import InputError
from specaudit.testing.server import ReferenceServer
from specaudit.testing.server_mutants import SAMPLING, SERVER_MUTANTS

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import EquivalenceSection, Snapshot
    from specaudit.models import ModelPair
    from specaudit.prompts import PromptSet

# The endpoint audit's budget here: the end-to-end self-test's (8 prompts x 8 samples x 32 tokens),
# at each of two levels, at the mutant's setting (server_mutants.SAMPLING or FEATURE_SAMPLING).
LEVELS = (1, 4)
# The quick self-test's budget per audit (a quarter of the requests' tokens: 4 samples x 16 tokens),
# over 3 seeds; measured to reach every mutant (docs/selftest.md).
QUICK_BUDGET = {"samples": 4, "max_new_tokens": 16}
QUICK_SEEDS = 3
ACCEPTANCE_KINDS = {"acceptance_stopped": "stopped_during_run", "acceptance_collapse": "collapse_under_load"}


def findings(snapshot: Snapshot) -> list[str]:
    """The causes a snapshot names (see the module docstring)."""

    def failed(section: EquivalenceSection) -> bool:
        entry = section.engines.get(SPECULATIVE_ENGINE)
        return entry is not None and entry.verdict is CheckStatus.FAIL

    found = []
    concurrency = snapshot.concurrency
    dependent = concurrency is not None and any(
        (tests.get(SPECULATIVE_ENGINE) or {}).get("verdict") == CheckStatus.FAIL for tests in concurrency.independence.values()
    )
    level_failed = concurrency is not None and any(failed(entry) for entry in concurrency.equivalence.values())
    if dependent:
        found.append("independence")
    if level_failed or (failed(snapshot.equivalence) and not dependent):
        found.append("equivalence")
    if snapshot.logprob_parity is not None and snapshot.logprob_parity.status == CheckStatus.FAIL:
        found.append("logprob_parity")
    stability = snapshot.acceptance_stability
    if stability is not None and stability.status == DisparityStatus.FLAG:
        kinds = {f.kind for f in stability.findings}
        found += [name for name, kind in ACCEPTANCE_KINDS.items() if kind in kinds]
    if snapshot.prefix_cache is not None:
        found += [f"equivalence:{state}" for state, entry in snapshot.prefix_cache.equivalence.items() if failed(entry)]
    checks = snapshot.output_invariants.checks if snapshot.output_invariants is not None else {}
    found += [f"invariant:{check}" for check, count in checks.items() if count]
    return found


def _sampling_fields(spec: SamplingSpec) -> dict:
    """A SamplingSpec as RunConfig's fields (the same names; logit_bias a mapping)."""
    return {f.name: dict(spec.logit_bias) if f.name == "logit_bias" else getattr(spec, f.name) for f in fields(spec)}


def server_audit(
    pair: ModelPair, prompt_set: PromptSet, mutant: str, *, seed: int, samples: int = 8, max_new_tokens: int = 32, alpha: float = 0.05
) -> dict:
    """One endpoint audit of one served mutant: its findings, budget and cost."""
    from specaudit.analysis import analyze
    from specaudit.engines import run

    bug = SERVER_MUTANTS[mutant]
    verify = RunConfig(target=pair.target_name, verify=bug.verify).load_verify() if bug.verify else None
    mix = {"mix_sampling": setting_label(bug.mix_sampling)} if bug.mix_sampling else {}
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        with (
            ReferenceServer(
                pair, speculative=True, verify=verify, policy=bug.policy(), decoding=bug.decoding, max_batch=max(LEVELS)
            ) as speculative,
            ReferenceServer(pair, max_batch=max(LEVELS)) as vanilla,
        ):
            cfg = RunConfig(
                target=pair.target_name,
                engines="endpoint",
                samples=samples,
                max_new_tokens=max_new_tokens,
                **_sampling_fields(bug.sampling),
                seed=seed,
                warmup=0,
                prefix_cache=bug.prefix_cache,
                extra={
                    "endpoint": {"speculative_url": speculative.url, "vanilla_url": vanilla.url, "concurrency_levels": list(LEVELS), **mix}
                },
            )
            run(cfg, folder, prompt_set=prompt_set, progress=False)
        ran = time.perf_counter() - started
        snapshot = analyze(folder, pair=pair, alpha=alpha, n_boot=200, seed=seed)
        seconds = time.perf_counter() - started
    found = findings(snapshot)
    from specaudit.gate import evaluate_gate

    return {
        "server": mutant,
        "seed": seed,
        "findings": found,
        "gate": {check.name: str(check.status) for check in evaluate_gate(snapshot).checks},
        "caught": bug.caught_by in found if bug.caught_by else bool(found),
        "pooled_alpha": snapshot.equivalence.alpha,  # the run's alpha split over its families
        "tokens": snapshot.run.n_output_tokens,
        "run_seconds": ran,
        "seconds": seconds,
    }


def server_selftest(
    pair: ModelPair,
    prompt_set: PromptSet,
    *,
    servers: Iterable[str] | None = None,
    seeds: Iterable[int] | None = None,
    alpha: float = 0.05,
    quick: bool = False,
) -> pd.DataFrame:
    """One row per served mutant: how often its cause was named over `seeds` (the correct server:
    how often anything was), a Clopper-Pearson 95% interval, and whether it met its target:
    the correct server's rate holds alpha in its interval; a mutant's interval lies above alpha.
    Default seeds: 20, or QUICK_SEEDS at the QUICK_BUDGET with `quick`; default servers: all, the
    grammar ones where llguidance is installed."""
    budget = QUICK_BUDGET if quick else {}
    seeds = range(QUICK_SEEDS if quick else 20) if seeds is None else seeds
    # by default, the grammar servers only where llguidance (the optional extra) is installed
    default = [n for n, m in SERVER_MUTANTS.items() if not m.sampling.grammar or grammar_available()]
    names = default if servers is None else list(servers)
    unknown = [n for n in names if n not in SERVER_MUTANTS]
    if unknown:
        raise InputError(f"unknown server mutant(s) {', '.join(unknown)}; choose from {', '.join(SERVER_MUTANTS)}")
    seeds = list(seeds)
    rows = []
    for name in names:
        audits = [server_audit(pair, prompt_set, name, seed=s, alpha=alpha, **budget) for s in seeds]
        hits = sum(a["caught"] for a in audits)
        interval = stats.binomtest(hits, len(audits)).proportion_ci(0.95)
        named = pd.Series([f for a in audits for f in a["findings"]], dtype=object).value_counts()
        correct = SERVER_MUTANTS[name].caught_by is None
        rows.append(
            {
                "server": name,
                "sampling": setting_label(SERVER_MUTANTS[name].sampling),
                "levels": ",".join(map(str, LEVELS)),
                "samples": budget.get("samples", 8),
                "max_new_tokens": budget.get("max_new_tokens", 32),
                "seeds": len(audits),
                "rate": hits / len(audits),
                "ci_low": interval.low,
                "ci_high": interval.high,
                "target": "alpha in CI" if correct else f"> alpha, names {SERVER_MUTANTS[name].caught_by}",
                "ok": bool(interval.low <= alpha <= interval.high) if correct else bool(interval.low > alpha),
                "named": ", ".join(f"{k} {v}" for k, v in named.items()),
                "tokens_per_audit": sum(a["tokens"] for a in audits) / len(audits),
                "seconds_per_audit": sum(a["seconds"] for a in audits) / len(audits),
                "cause": SERVER_MUTANTS[name].cause,
            }
        )
    return pd.DataFrame(rows)


__all__ = ["LEVELS", "QUICK_BUDGET", "QUICK_SEEDS", "SAMPLING", "findings", "server_audit", "server_selftest"]
