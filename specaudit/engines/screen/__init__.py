"""The screen: acceptance on every prompt from batched target samples.

    _screen.py     `screen_paths` (decode-free acceptance along target paths) and the draft's call-invariance guard
    executor.py    `--engines screen`: records of engine "screen", the local engines on a subset

Its batched sampler and teacher-forced distributions (`sample_batch`, `teacher_forced_probs`) are
specaudit.engines.batched_sampling, which mitigate shares; whether a draft's q depends on how it is
called (`draft_batch_invariance`) is specaudit.decoding.call_invariance, which analysis shares.
The math of acceptance along a path (expected counts, one run's rate and its moments) is
statistics: specaudit.stats.acceptance.
"""

from specaudit.engines.screen._screen import check_call_invariance, screen_paths
from specaudit.engines.screen_records import ScreenedPath

__all__ = [
    "ScreenedPath",
    "check_call_invariance",
    "screen_paths",
]
