"""Statistics: equivalence of output distributions, disparity across groups, sampler audits.

scipy.stats-style results (`statistic`, `pvalue`, `confidence_interval()`, `verdict`) and
fairlearn-style group tables (`GroupFrame`: `overall`, `by_group`, `difference()`, `ratio()`).
"""

from specaudit.stats._bootstrap import BootstrapResult, cluster_bootstrap
from specaudit.stats._results import ImpossibleTokens, PITResult, StatTestResult, ZTestResult, bh, holm
from specaudit.stats.advice import (
    best_draft_length,
    break_even_alpha,
    expected_speedup,
    expected_tokens_per_step,
    recommendations,
    simulate_fallback,
)
from specaudit.stats.disparity import (
    METRICS,
    DrillDown,
    GroupFrame,
    KruskalResult,
    PairwiseResult,
    disparity_section,
    drilldown,
    kruskal_test,
    minimum_detectable_difference,
    pairwise_test,
    per_prompt_metrics,
    simulate_records,
)
from specaudit.stats.equivalence import (
    GATE_TESTS,
    GoodnessOfFit,
    GreedyExactness,
    TVBound,
    TwoSample,
    acceptance_calibration,
    acceptance_indicators,
    draft_affinity,
    goodness_of_fit,
    greedy_exactness,
    impossible_tokens,
    pit_uniformity,
    pit_values,
    surprisal_martingale,
    tv_bound,
    tv_bound_profile,
    tv_bound_two_sample,
    two_sample,
)
from specaudit.stats.power import detection_power, minimum_detectable_effect, minimum_detectable_effects, samples_needed, z_shift
from specaudit.stats.sampler_audit import SamplerAuditResult, audit_sampler
from specaudit.stats.scoring import TokenScores, logit_gaps, score_records, token_statistics

__all__ = [name for name in dir() if not name.startswith("_")]
