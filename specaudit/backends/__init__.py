"""Backends: decoding by another engine (a live server, vLLM, llama.cpp), recorded as a run.

A backend is named in `--engines` on its own (e.g. `--engines endpoint`). Its module here holds
the settings, client and data layer; its executor (specaudit.execution.endpoint / .vllm) writes
the same records.jsonl + manifest.json as the local engines, with engine names "vanilla"
(speculation off) and "speculative" (on), so every analysis applies unchanged. Modules are
imported only when their backend runs: this package itself stays light.
"""

from __future__ import annotations

BACKENDS = {
    "endpoint": "specaudit.backends.endpoint",
    "llama-cpp": "specaudit.backends.llama_cpp",
    "vllm": "specaudit.backends.vllm",
    "screen": "specaudit.screen",  # no engine: acceptance along batched target samples
}


__all__ = ["BACKENDS"]
