"""Running a plan into a run folder: the plan, the run folder, and the executors.

    plan.py      PlanItem generation (interleaving, timing repeats) and derive_seed
    folder.py    RunFolder: prompts, output checks, lock, resume check, manifest, writer, summary
    base.py      the Executor interface and `execute`, the one run loop
    decode.py    decoding one item in this process (shared by local and Ray)
    local.py, ray.py, endpoint.py, vllm.py    the executors

(A package named `specaudit.run` would replace the public function `specaudit.run` whenever it
is imported, so the package has this name; see docs/ARCHITECTURE.md, "The run package".)
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from specaudit.execution.base import Executor, execute
from specaudit.execution.folder import RunFolder, RunSummary

if TYPE_CHECKING:
    from specaudit.config import RunConfig

# name -> "module:class"; a backend named in --engines runs alone, otherwise cfg.executor decides.
EXECUTORS = {
    "local": "specaudit.execution.local:LocalExecutor",
    "ray": "specaudit.execution.ray:RayExecutor",
    "endpoint": "specaudit.execution.endpoint:EndpointExecutor",
    "vllm": "specaudit.execution.vllm:VllmExecutor",
    "screen": "specaudit.execution.screen:ScreenExecutor",
    "llama-cpp": "specaudit.execution.llama_cpp:LlamaCppExecutor",
}


def executor_for(cfg: RunConfig, *, pair=None) -> Executor:
    """The executor a config asks for: its backend (`--engines endpoint|vllm`), else `--executor`."""
    from specaudit.backends import BACKENDS

    engines = tuple(cfg.engines)
    if "screen" in engines:  # alone, or with the local engines on a subset of the screened prompts
        name = "screen"
    else:
        name = engines[0] if len(engines) == 1 and engines[0] in BACKENDS else cfg.executor
    module_name, _, class_name = EXECUTORS[name].partition(":")
    executor_class = getattr(importlib.import_module(module_name), class_name)
    if name in ("local", "screen"):
        return executor_class(cfg, pair=pair)
    if name == "ray":
        return executor_class(cfg, workers=cfg.workers, address=cfg.ray_address)
    return executor_class(cfg)


def run(
    cfg: RunConfig,
    out_dir: str | Path,
    *,
    pair=None,
    prompt_set=None,
    progress: bool = True,
    command: str | None = None,
    shard: tuple[int, int] | None = None,
) -> RunSummary:
    """Execute the plan into `out_dir`, skipping records already there. `shard=(i, N)` runs only
    the prompts whose stable hash falls in shard i of N (see specaudit.shards)."""
    return execute(executor_for(cfg, pair=pair), out_dir, prompt_set=prompt_set, progress=progress, command=command, shard=shard)


__all__ = ["EXECUTORS", "Executor", "RunFolder", "RunSummary", "execute", "executor_for", "run"]
