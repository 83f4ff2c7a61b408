"""End-to-end self-test: each mutant runs inside the speculative engine, and the full
equivalence analysis (the same `analyze` a user runs) must reject it; the correct sampler must
be rejected only at the nominal rate."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Iterable

import pandas as pd
from scipy import stats

from specaudit.config import RunConfig
from specaudit.selftest.mutants import MUTANTS


def end_to_end_audit(pair, prompt_set, sampler: str, *, seed: int, samples: int, max_new_tokens: int, k: int = 4,
                     temperature: float = 1.0, alpha: float = 0.05, workdir: str | Path | None = None) -> dict:
    """One audit of one sampler: decode with it, analyse, return verdict and budget."""
    from specaudit.analysis import analyze
    from specaudit.runner import run

    cfg = RunConfig(engines=("speculative",), k=k, temperature=temperature, samples=samples, max_new_tokens=max_new_tokens,
                    seed=seed, warmup=0, verify=f"specaudit.selftest.mutants:{MUTANTS[sampler].__name__}",
                    target=pair.target_name, draft=pair.draft_name)
    with tempfile.TemporaryDirectory(dir=workdir) as folder:
        started = time.perf_counter()
        run(cfg, folder, pair=pair, prompt_set=prompt_set, progress=False)
        snapshot = analyze(folder, pair=pair, alpha=alpha, n_boot=10, seed=seed)
        seconds = time.perf_counter() - started
    engine = snapshot["equivalence"]["engines"]["speculative"]
    gof = engine.get("goodness_of_fit", {})
    impossible = bool(gof.get("impossible_tokens", {}).get("statistic"))
    return {"sampler": sampler, "seed": seed, "rejected": engine["verdict"] == "fail", "tokens": gof.get("n_tokens", 0),
            "pvalue": 0.0 if impossible else gof.get("pvalue"), "seconds": seconds,
            "failed_tests": [row["test"] for row in gof.get("gate", []) if row.get("reject")] + (["impossible_tokens"] if impossible else [])}


def end_to_end_selftest(pair, prompt_set, *, samplers: Iterable[str] | None = None, seeds: Iterable[int] = range(20),
                        samples: int = 8, max_new_tokens: int = 32, k: int = 4, temperature: float = 1.0,
                        alpha: float = 0.05) -> pd.DataFrame:
    """Rejection rate per sampler over seeds, with a Clopper–Pearson 95% interval, and the median
    family-wise (Holm) p-value of the audits: how far from the line a sampler sits."""
    rows = []
    for sampler in samplers or list(MUTANTS):
        runs = [end_to_end_audit(pair, prompt_set, sampler, seed=s, samples=samples, max_new_tokens=max_new_tokens, k=k,
                                 temperature=temperature, alpha=alpha) for s in seeds]
        rejected = sum(r["rejected"] for r in runs)
        interval = stats.binomtest(rejected, len(runs)).proportion_ci(0.95)
        caught_by = pd.Series([t for r in runs for t in r["failed_tests"]]).value_counts()
        rows.append({
            "sampler": sampler, "seeds": len(runs), "rejection_rate": rejected / len(runs), "ci_low": interval.low,
            "ci_high": interval.high, "median_pvalue": float(pd.Series([r["pvalue"] for r in runs], dtype=float).median()),
            "tokens_per_audit": sum(r["tokens"] for r in runs) / len(runs),
            "seconds_per_audit": sum(r["seconds"] for r in runs) / len(runs),
            "caught_by": ", ".join(f"{name} {count}" for name, count in caught_by.items()),
        })
    return pd.DataFrame(rows)
