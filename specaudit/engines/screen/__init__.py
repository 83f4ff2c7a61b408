"""The screen: acceptance on every prompt from batched target samples.

    _sampling.py   the batched sampler (`sample_batch`) and teacher-forced distributions
    _screen.py     `screen_paths` (decode-free acceptance along target paths) and the draft's call-invariance guard
    executor.py    `--engines screen`: records of engine "screen", the local engines on a subset

The math of acceptance along a path (expected counts, one run's rate and its moments) is
statistics: specaudit.stats.acceptance.
"""

from specaudit.engines.screen._sampling import SampledBatch, sample_batch, teacher_forced_probs
from specaudit.engines.screen._screen import (
    CALL_INVARIANCE_TV,
    FLOAT_NOISE_FACTOR,
    check_call_invariance,
    draft_batch_invariance,
    screen_paths,
)
from specaudit.engines.screen_records import ScreenedPath

__all__ = [
    "CALL_INVARIANCE_TV",
    "FLOAT_NOISE_FACTOR",
    "SampledBatch",
    "ScreenedPath",
    "check_call_invariance",
    "draft_batch_invariance",
    "sample_batch",
    "screen_paths",
    "teacher_forced_probs",
]
