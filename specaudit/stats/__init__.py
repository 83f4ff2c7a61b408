"""Statistics: equivalence of output distributions, disparity across groups, sampler audits.

scipy.stats-style results (`statistic`, `pvalue`, `confidence_interval()`, `verdict`) and
fairlearn-style group tables (`GroupFrame`: `overall`, `by_group`, `difference()`, `ratio()`).
Names are imported on first use: the torch-based modules (scoring, sampler audit) load only
when asked for, so light users (monitoring, gate) stay light.
"""

from importlib import import_module
from typing import Any

_PUBLIC = {
    "BootstrapResult": "specaudit.stats._bootstrap",
    "DrillDown": "specaudit.stats.disparity",
    "GATE_TESTS": "specaudit.stats.equivalence",
    "GoodnessOfFit": "specaudit.stats.equivalence",
    "GreedyExactness": "specaudit.stats.equivalence",
    "GroupFrame": "specaudit.stats.disparity",
    "ImpossibleTokens": "specaudit.stats._results",
    "KruskalResult": "specaudit.stats.disparity",
    "METRICS": "specaudit.stats.disparity",
    "PITResult": "specaudit.stats._results",
    "PairwiseResult": "specaudit.stats.disparity",
    "SamplerAuditResult": "specaudit.stats.sampler_audit",
    "StatTestResult": "specaudit.stats._results",
    "TVBound": "specaudit.stats.equivalence",
    "TokenScores": "specaudit.stats.scoring",
    "TwoSample": "specaudit.stats.equivalence",
    "ZTestResult": "specaudit.stats._results",
    "acceptance_calibration": "specaudit.stats.equivalence",
    "acceptance_indicators": "specaudit.stats.equivalence",
    "audit_sampler": "specaudit.stats.sampler_audit",
    "best_draft_length": "specaudit.stats.advice",
    "bh": "specaudit.stats._results",
    "break_even_alpha": "specaudit.stats.advice",
    "cluster_bootstrap": "specaudit.stats._bootstrap",
    "detection_power": "specaudit.stats.power",
    "disparity_section": "specaudit.stats.disparity",
    "draft_affinity": "specaudit.stats.equivalence",
    "engine_status": "specaudit.stats.equivalence",
    "drilldown": "specaudit.stats.disparity",
    "expected_speedup": "specaudit.stats.advice",
    "expected_tokens_per_step": "specaudit.stats.advice",
    "goodness_of_fit": "specaudit.stats.equivalence",
    "greedy_exactness": "specaudit.stats.equivalence",
    "holm": "specaudit.stats._results",
    "impossible_tokens": "specaudit.stats.equivalence",
    "kruskal_test": "specaudit.stats.disparity",
    "logit_gaps": "specaudit.stats.scoring",
    "minimum_detectable_difference": "specaudit.stats.disparity",
    "minimum_detectable_effect": "specaudit.stats.power",
    "minimum_detectable_effects": "specaudit.stats.power",
    "pairwise_test": "specaudit.stats.disparity",
    "per_prompt_metrics": "specaudit.stats.disparity",
    "ratio_interval": "specaudit.stats.disparity",
    "pit_uniformity": "specaudit.stats.equivalence",
    "pit_values": "specaudit.stats.equivalence",
    "recommendations": "specaudit.stats.advice",
    "samples_needed": "specaudit.stats.power",
    "score_records": "specaudit.stats.scoring",
    "simulate_fallback": "specaudit.stats.advice",
    "simulate_records": "specaudit.stats.disparity",
    "step_pit_values": "specaudit.stats.equivalence",
    "surprisal_martingale": "specaudit.stats.equivalence",
    "token_statistics": "specaudit.stats.scoring",
    "tv_bound": "specaudit.stats.equivalence",
    "tv_bound_profile": "specaudit.stats.equivalence",
    "tv_bound_two_sample": "specaudit.stats.equivalence",
    "two_sample": "specaudit.stats.equivalence",
    "z_shift": "specaudit.stats.power",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'specaudit.stats' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
