"""End-to-end self-test: each mutant runs inside the speculative engine, and the full
equivalence analysis (the same `analyze` a user runs) must reject it; the correct sampler must
be rejected only at the nominal rate."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy import stats

from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.contracts.snapshot import GoodnessOfFit
from specaudit.contracts.status import CheckStatus
from specaudit.decoding._spec import SamplingSpec
from specaudit.decoding.settings import BUG_CLASSES, setting_label
from specaudit.errors import InputError
from specaudit.selftest.harness import selftest_config
from specaudit.selftest.mutants import MUTANTS

if TYPE_CHECKING:
    from specaudit.decoding.settings import BugClass
    from specaudit.models import ModelPair
    from specaudit.prompts import PromptSet

# Mutants the quick end-to-end budget (3 seeds on the tiny pair: 8 prompts x 8 samples x 32
# tokens) does not catch reliably, with the measured reason (docs/selftest.md). There a miss is
# reported as out of reach, not failed; the full self-test still requires them.
BELOW_QUICK_BUDGET = {
    "bf16_draft_logits": "moves the output by < 1% TV; caught only through a rare impossible rejection",
}


def e2e_samplers() -> dict:
    """Every sampler the end-to-end self-test runs: the unit mutants and the field mutants,
    which need the engine's logits (specaudit.selftest.field_mutants)."""
    from specaudit.selftest.field_mutants import FIELD_MUTANTS

    return {**MUTANTS, **FIELD_MUTANTS}


def end_to_end_audit(
    pair: ModelPair,
    prompt_set: PromptSet,
    sampler: str,
    *,
    seed: int,
    samples: int,
    max_new_tokens: int,
    k: int = 4,
    temperature: float = 1.0,
    alpha: float = 0.05,
    keep: str | Path | None = None,
    spec: SamplingSpec | None = None,
) -> dict:
    """One audit of one sampler: decode with it, analyse, return verdict and budget. With `keep`,
    the run folder is written there and kept (a pool for `subsampled_detection`). `spec`, when
    given, is the whole sampling setting (it overrides `temperature`)."""
    from specaudit.analysis import analyze
    from specaudit.engines import run

    spec = spec or SamplingSpec(temperature=temperature)
    function = e2e_samplers()[sampler]
    cfg = selftest_config(
        spec,
        samples=samples,
        # greedy runs are judged against vanilla's argmax path
        engines=(CONTROL_ENGINE, SPECULATIVE_ENGINE) if spec.greedy else (SPECULATIVE_ENGINE,),
        k=k,
        max_new_tokens=max_new_tokens,
        seed=seed,
        verify=f"{function.__module__}:{function.__name__}",
        target=pair.target_name,
        draft=pair.draft_name,
    )
    with nullcontext(keep) if keep is not None else tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        run(cfg, folder, pair=pair, prompt_set=prompt_set, progress=False)
        snapshot = analyze(folder, pair=pair, alpha=alpha, n_boot=10, seed=seed)
        seconds = time.perf_counter() - started
    engine = snapshot.equivalence.engines[SPECULATIVE_ENGINE]
    rejected = engine.verdict is CheckStatus.FAIL
    if spec.greedy:  # greedy runs are judged token for token against the target's own argmax path
        return {
            "sampler": sampler,
            "seed": seed,
            "rejected": rejected,
            "tokens": engine.greedy.n_pairs if engine.greedy is not None and engine.greedy.n_pairs is not None else 0,  # outputs compared
            "pvalue": np.nan,
            "seconds": seconds,
            "failed_tests": ["greedy_exactness"] if rejected else [],
        }
    gof = engine.goodness_of_fit or GoodnessOfFit()
    impossible = bool(gof.impossible_tokens is not None and gof.impossible_tokens.statistic)
    return {
        "sampler": sampler,
        "seed": seed,
        "rejected": rejected,
        "tokens": gof.n_tokens if gof.n_tokens is not None else 0,
        "pvalue": 0.0 if impossible else gof.pvalue,
        "seconds": seconds,
        "failed_tests": [row.test for row in gof.gate if row.reject] + (["impossible_tokens"] if impossible else []),
    }


def subsampled_detection(
    run_dirs: Sequence[str | Path],
    pair: ModelPair,
    *,
    samples: int | Sequence[int],
    subsamples: int = 200,
    alpha: float = 0.05,
    seed: int = 0,
) -> pd.DataFrame:
    """Rejection rate of audits with `samples` sequences per prompt (one budget or several),
    estimated from the pooled sequences of audits of one sampler (`run_dirs`: same prompts and
    settings, any number of samples each). One row per budget.

    The pooled sequences are independent draws, so `samples` per prompt picked without
    replacement are distributed exactly as a fresh audit's: the mean verdict over `subsamples`
    random picks is unbiased for the detection rate at that budget (α for a correct sampler)
    and, being a U-statistic, varies no more than the rate over the disjoint audits the pool
    holds. The picks overlap, so the 95% interval is the Jeffreys interval for that many
    disjoint audits (conservative). `p99_pvalue`: the 99th percentile of the picks' family-wise
    p-values; below α means at least 99% of the picks were rejected.
    """
    from specaudit.analysis.equivalence import score_sampled
    from specaudit.execution.records import iter_run_records
    from specaudit.stats.equivalence import goodness_of_fit

    budgets = [samples] if isinstance(samples, int) else list(samples)
    setting = _pool_setting(run_dirs)
    pooled = [
        {**record, "key": f"{index}/{record['key']}"}  # keys repeat across audits
        for index, folder in enumerate(run_dirs)
        for record in iter_run_records(folder, include_timing=False)
        if record["engine"] == SPECULATIVE_ENGINE
    ]
    by_prompt = pd.Series([r["key"] for r in pooled]).groupby([r["prompt_id"] for r in pooled]).agg(list)
    smallest = int(by_prompt.map(len).min()) if len(by_prompt) else 0
    if max(budgets) > smallest:
        raise InputError(f"the pool holds {smallest} sequences of some prompt, fewer than the {max(budgets)} per prompt of one audit")
    frame = score_sampled(pooled, pair, setting["plant_disparity"])[0].tokens
    record_of = {r["key"]: r for r in pooled}
    tokens_of = frame.groupby("key").size()
    rng = np.random.default_rng(seed)
    rows = []
    for budget in budgets:
        verdicts, pvalues, tokens = [], [], []
        for draw in range(subsamples):
            keys = [key for group in by_prompt for key in rng.choice(group, budget, replace=False)]
            gof = goodness_of_fit(
                frame[frame["key"].isin(keys)], [record_of[k] for k in keys], engine=SPECULATIVE_ENGINE, by=(), alpha=alpha, seed=draw
            )
            verdicts.append(gof.verdict == CheckStatus.FAIL)
            pvalues.append(0.0 if gof.impossible.statistic else gof.pvalue)
            tokens.append(int(tokens_of.reindex(keys).sum()))
        rate, disjoint = float(np.mean(verdicts)), smallest // budget
        low, high = stats.beta.ppf([0.025, 0.975], rate * disjoint + 0.5, (1 - rate) * disjoint + 0.5)
        rows.append(
            {
                "samples": budget,
                "tokens_per_audit": float(np.mean(tokens)),
                "rate": rate,
                "ci_low": float(low),
                "ci_high": float(high),
                "p99_pvalue": float(np.quantile(pvalues, 0.99)),
                "pool_audits": disjoint,
                "subsamples": subsamples,
            }
        )
    return pd.DataFrame(rows)


def _pool_setting(run_dirs: Sequence[str | Path]) -> dict:
    """The sampling setting the runs share; an InputError names the first run that differs."""
    from specaudit.execution.records import read_manifest

    if not run_dirs:
        raise InputError("no run folders to pool")
    settings = []
    for folder in run_dirs:
        manifest = read_manifest(folder)
        # what fixes the distribution a run samples from (the run's decoding identity): pooled runs
        # may differ only in seed and budget
        decoding = {key: value for key, value in (manifest.get("decoding") or {}).items() if key != "seed"}
        settings.append(decoding | {"prompt set": manifest.get("prompt_set_checksum")})
        differ = [key for key in {**settings[0], **settings[-1]} if settings[-1].get(key) != settings[0].get(key)]
        if differ:
            raise InputError(f"cannot pool {folder} with {run_dirs[0]}: their {', '.join(differ)} differ")
    return settings[0]


def end_to_end_selftest(
    pair: ModelPair,
    prompt_set: PromptSet,
    *,
    samplers: Iterable[str] | None = None,
    seeds: Iterable[int] = range(20),
    samples: int = 8,
    max_new_tokens: int = 32,
    k: int = 4,
    temperature: float = 1.0,
    alpha: float = 0.05,
    subsamples: int = 200,
    spec: SamplingSpec | None = None,
    quick: bool = False,
) -> pd.DataFrame:
    """Rejection rate per sampler over seeds, with a Clopper–Pearson 95% interval; the same rate
    estimated from `subsamples` audits re-drawn from the seeds' pooled sequences (a lower-variance
    estimate, see `subsampled_detection`); and the median family-wise (Holm) p-value of the
    audits: how far from the line a sampler sits. `spec` is the sampling setting (default: T =
    `temperature`, no truncation); `quick` marks a quick budget (see `_verdict`)."""
    spec = spec or SamplingSpec(temperature=temperature)
    rows = []
    seeds = list(seeds)
    for sampler in samplers or list(MUTANTS):
        with tempfile.TemporaryDirectory() as pool:
            folders = [Path(pool) / str(s) for s in seeds]
            runs = [
                end_to_end_audit(
                    pair,
                    prompt_set,
                    sampler,
                    seed=s,
                    samples=samples,
                    max_new_tokens=max_new_tokens,
                    k=k,
                    alpha=alpha,
                    keep=folder,
                    spec=spec,
                )
                for s, folder in zip(seeds, folders)
            ]
            redraw = len(seeds) > 1 and not spec.greedy  # greedy audits have no sampled tokens to re-draw
            pooled = subsampled_detection(folders, pair, samples=samples, subsamples=subsamples, alpha=alpha) if redraw else None
        rejected = sum(r["rejected"] for r in runs)
        interval = stats.binomtest(rejected, len(runs)).proportion_ci(0.95)
        caught_by = pd.Series([t for r in runs for t in r["failed_tests"]]).value_counts()
        rows.append(
            {
                "sampler": sampler,
                "sampling": setting_label(spec),
                "seeds": len(runs),
                "rejection_rate": rejected / len(runs),
                "ci_low": interval.low,
                "ci_high": interval.high,
                "subsampled_rate": pooled["rate"].item() if pooled is not None else np.nan,
                "median_pvalue": float(pd.Series([r["pvalue"] for r in runs], dtype=float).median()),
                "tokens_per_audit": sum(r["tokens"] for r in runs) / len(runs),
                "seconds_per_audit": sum(r["seconds"] for r in runs) / len(runs),
                "caught_by": ", ".join(f"{name} {count}" for name, count in caught_by.items()),
                **_verdict(sampler, interval.low, interval.high, alpha, spec=spec, quick=quick),
            }
        )
    return pd.DataFrame(rows)


def blind_class(sampler: str, spec: SamplingSpec) -> BugClass | None:
    """The bug class (decoding.settings.BUG_CLASSES) whose mutant `sampler` is and which `spec`
    cannot show, or None."""
    for bug in BUG_CLASSES:
        if sampler in [m.strip() for m in bug.mutant.split(",")] and not bug.visible(spec):
            return bug
    return None


def _verdict(sampler: str, ci_low: float, ci_high: float, alpha: float, *, spec: SamplingSpec | None = None, quick: bool = False) -> dict:
    """Whether a row met its target, and whether a detection was expected of it at all.

    - The correct sampler, and a mutant at a setting where its bug cannot change the output (it
      is then distributed exactly as the correct sampler): rejected at a rate whose 95% interval
      holds alpha (no excess false alarms).
    - A mutant the quick budget is measured not to reach (`BELOW_QUICK_BUDGET`), with `quick`:
      reported, never failed; the full self-test holds it to the next rule.
    - Any other mutant: rejected at a rate whose interval lies above alpha (the audit sees it at
      all at this budget; the sharper rate is `subsampled_rate`).
    """
    calibrated = bool(ci_low <= alpha <= ci_high)
    spec = spec or SamplingSpec()
    if e2e_samplers().get(sampler) is MUTANTS["correct"]:
        return {"target": "alpha in CI", "ok": calibrated, "expected": "calibrated"}
    blind = blind_class(sampler, spec)
    if blind is not None:
        return {"target": "alpha in CI", "ok": calibrated, "expected": f"blind at {setting_label(spec)}: {blind.blind_when}"}
    if quick and sampler in BELOW_QUICK_BUDGET:
        return {"target": "none (quick)", "ok": True, "expected": f"out of the quick budget's reach: {BELOW_QUICK_BUDGET[sampler]}"}
    return {"target": "> alpha", "ok": bool(ci_low > alpha), "expected": "caught"}
