"""Moved to specaudit.execution.ray (the Ray executor); these names stay importable from here."""

from specaudit.execution.ray import (
    ACTOR_NAME,
    MAX_SHARD_ATTEMPTS,
    SHARDS_PER_WORKER,
    DecodeWorker,
    RayExecutor,
)


def run_on_ray(cfg, out_dir, *, workers=None, address=None, progress=True, command=None, prompt_set=None, shard=None):
    """Run `cfg`'s plan into `out_dir` on Ray actors; the folder is the same as a local run's."""
    from specaudit.execution import execute

    return execute(
        RayExecutor(cfg, workers=workers, address=address), out_dir, prompt_set=prompt_set, progress=progress, command=command, shard=shard
    )


__all__ = ["ACTOR_NAME", "MAX_SHARD_ATTEMPTS", "SHARDS_PER_WORKER", "DecodeWorker", "RayExecutor", "run_on_ray"]
