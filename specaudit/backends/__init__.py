"""Backends: decoding by another engine (a live server, vLLM, llama.cpp), recorded as a run.

A backend is named in `--engines` on its own (e.g. `--engines endpoint`). Its module provides

    run_backend(cfg, out_dir, *, prompt_set, progress, command, shard) -> specaudit.runner.RunSummary

and writes the same records.jsonl + manifest.json as the local engines, with engine names
"vanilla" (speculation off) and "speculative" (on), so every analysis applies unchanged.
Modules are imported only when their backend runs: this package itself stays light.
"""

from __future__ import annotations

import importlib
from types import ModuleType

BACKENDS = {
    "endpoint": "specaudit.backends.endpoint",
    "llama-cpp": "specaudit.backends.llama_cpp",
    "vllm": "specaudit.backends.vllm",
}


def backend_module(engines) -> ModuleType | None:
    """The module of the backend a run's engines name, or None for local engines."""
    engines = tuple(engines or ())
    if len(engines) != 1 or engines[0] not in BACKENDS:
        return None
    return importlib.import_module(BACKENDS[engines[0]])


__all__ = ["BACKENDS", "backend_module"]
