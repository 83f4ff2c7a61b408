"""Engines: everything that turns plan items into records, one folder or module per engine.

    local.py, ray.py     specaudit's own engines (specaudit.decoding) in this process, or on Ray actors
    decode.py            decoding one plan item in this process (shared by local and Ray)
    screen/              batched target samples and the acceptance expected along them
    endpoint/ vllm/ llama_cpp/   other engines: each its settings and client (client.py) and its executor

Which name is which engine is the registry, specaudit.contracts.engines (data only); this package
resolves it. The run folder and the one run loop are specaudit.execution.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from specaudit.contracts.engines import ENGINES, LOCAL_EXECUTORS, backend_of, resolve
from specaudit.contracts.run import SCREEN_ENGINE

if TYPE_CHECKING:
    from specaudit.config import RunConfig
    from specaudit.execution import Executor, RunSummary
    from specaudit.models import ModelPair
    from specaudit.prompts import PromptSet


def executor_for(cfg: RunConfig, *, pair: ModelPair | None = None) -> Executor:
    """The executor a config asks for: a backend's (it runs alone, or with the screen where it runs
    one), the screen's (local engines beside it), else the one `--executor` names for the local engines."""
    backend = backend_of(cfg.engines)
    if backend is not None:  # with the screen beside it where it runs one (llama.cpp)
        return resolve(backend.executor)(cfg)
    if SCREEN_ENGINE in cfg.engines:
        return resolve(ENGINES[SCREEN_ENGINE].executor)(cfg, pair=pair)
    executor_class = resolve(LOCAL_EXECUTORS[cfg.executor])
    if cfg.executor == "ray":
        return executor_class(cfg, workers=cfg.workers, address=cfg.ray_address)
    return executor_class(cfg, pair=pair)


def run(
    cfg: RunConfig,
    out_dir: str | Path,
    *,
    pair: ModelPair | None = None,
    prompt_set: PromptSet | None = None,
    progress: bool = True,
    command: str | None = None,
    shard: tuple[int, int] | None = None,
) -> RunSummary:
    """Execute the plan into `out_dir`, skipping records already there. `shard=(i, N)` runs only
    the prompts whose stable hash falls in shard i of N (specaudit.execution.plan.shard_of)."""
    from specaudit.execution import execute

    return execute(executor_for(cfg, pair=pair), out_dir, prompt_set=prompt_set, progress=progress, command=command, shard=shard)


__all__ = ["executor_for", "run"]
