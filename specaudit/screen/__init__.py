"""The screen: acceptance on every prompt from batched target samples (see _acceptance for the math).

Public face: `screen_paths` (decode-free acceptance along target paths), the math helpers
`expected_counts` / `expected_run_rate` / `run_rate_moments` / `position_acceptance`, and the batched sampler `sample_batch`.
"""

from specaudit.screen._acceptance import (
    PathAcceptance,
    accepted_on_path,
    expected_counts,
    expected_run_rate,
    ngram_counts,
    position_acceptance,
    run_rate_moments,
    sample_run,
)
from specaudit.screen._sampling import SampledBatch, sample_batch, teacher_forced_probs
from specaudit.screen._screen import (
    CALL_INVARIANCE_TV,
    FLOAT_NOISE_FACTOR,
    ScreenedPath,
    check_call_invariance,
    draft_batch_invariance,
    screen_paths,
)

__all__ = [
    "CALL_INVARIANCE_TV",
    "FLOAT_NOISE_FACTOR",
    "PathAcceptance",
    "SampledBatch",
    "ScreenedPath",
    "accepted_on_path",
    "check_call_invariance",
    "draft_batch_invariance",
    "expected_counts",
    "expected_run_rate",
    "ngram_counts",
    "position_acceptance",
    "run_rate_moments",
    "sample_batch",
    "sample_run",
    "screen_paths",
    "teacher_forced_probs",
]
