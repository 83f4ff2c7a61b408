"""Is the speculative output distributed exactly as the target's? Tests, bounds and statuses.

One module per subject (docs/statistics.md explains each test):

- ``token_tests``: per-token tests under the target (PIT, step PIT, surprisal and draft-affinity
  statistics, impossible tokens, acceptance calibration);
- ``goodness_of_fit``: the white-box battery over those tests, with its family-wise rule;
- ``two_sample``: black-box comparison with the reference engine, prompt by prompt;
- ``greedy``: token-for-token exactness of greedy decoding;
- ``bounds``: upper confidence bounds on the TV (and KL) distance, the basis of EQUIVALENT;
- ``pit_bound``: an upper bound on the PIT's distance from uniform, the positive statement;
- ``status``: one engine's EquivalenceStatus from all of the above.
"""

from specaudit.stats.equivalence._common import (
    DIFFERENT,
    EQUIVALENT,
    GATE_TESTS,
    NOT_RUN,
    NOT_SHOWN,
    TWO_SAMPLE_TESTS,
)
from specaudit.stats.equivalence.bounds import (
    TVBound,
    tv_bound,
    tv_bound_profile,
    tv_bound_two_sample,
)
from specaudit.stats.equivalence.goodness_of_fit import GoodnessOfFit, goodness_of_fit
from specaudit.stats.equivalence.greedy import (
    GREEDY_REL_TOLERANCE,
    GreedyExactness,
    greedy_exactness,
)
from specaudit.stats.equivalence.pit_bound import PITDistortionBound, pit_distortion_bound
from specaudit.stats.equivalence.status import engine_status
from specaudit.stats.equivalence.token_tests import (
    _adinf_cdf,
    acceptance_calibration,
    acceptance_indicators,
    anderson_darling_uniform,
    draft_affinity,
    impossible_tokens,
    pit_uniformity,
    pit_values,
    step_pit_masses,
    step_pit_test,
    step_pit_values,
    surprisal_martingale,
)
from specaudit.stats.equivalence.two_sample import (
    TwoSample,
    _ad_statistic,
    _g_statistic,
    two_sample,
)

__all__ = [
    "DIFFERENT",
    "EQUIVALENT",
    "GATE_TESTS",
    "GREEDY_REL_TOLERANCE",
    "NOT_RUN",
    "NOT_SHOWN",
    "TWO_SAMPLE_TESTS",
    "GoodnessOfFit",
    "GreedyExactness",
    "PITDistortionBound",
    "TVBound",
    "TwoSample",
    "_ad_statistic",
    "_adinf_cdf",
    "_g_statistic",
    "acceptance_calibration",
    "acceptance_indicators",
    "anderson_darling_uniform",
    "draft_affinity",
    "engine_status",
    "goodness_of_fit",
    "greedy_exactness",
    "impossible_tokens",
    "pit_distortion_bound",
    "pit_uniformity",
    "pit_values",
    "step_pit_masses",
    "step_pit_test",
    "step_pit_values",
    "surprisal_martingale",
    "tv_bound",
    "tv_bound_profile",
    "tv_bound_two_sample",
    "two_sample",
]
