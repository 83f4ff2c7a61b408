"""vLLM's own engines as one timed decoding, for `specaudit mitigate`'s policy re-audit.

A policy picks a draft length per group, or routes a group to plain decoding; vLLM fixes
`num_speculative_tokens` when an engine is built, so this keeps one engine per k the re-audit asks
for (k = 0: plain decoding), each built from the run's own `llm_kwargs` (the manifest's), on first
use. They stay up together: the re-audit interleaves them prompt by prompt.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.engines.vllm.client import engine_device, generate_alone, import_vllm, request_timings, sampling_kwargs, start_engine
from specaudit.errors import InputError


def engine_kwargs(stored: dict[str, dict], k: int) -> dict:
    """`vllm.LLM` keywords for draft length k from the run's stored ones: the plain engine's at
    k = 0, else the speculative engine's with `num_speculative_tokens` = k."""
    if k == 0:
        return copy.deepcopy(stored[CONTROL_ENGINE])
    kwargs = copy.deepcopy(stored[SPECULATIVE_ENGINE])
    kwargs["speculative_config"]["num_speculative_tokens"] = int(k)
    kwargs.pop("per_request_spec_decode_metrics", None)  # the re-audit times requests, it does not count drafts
    return kwargs


def run_decoder(manifest: dict, *, max_new_tokens: int) -> Callable[[list[int], int, int], tuple[float, int]]:
    """The run's vLLM engines as (prompt ids, k, seed) -> (seconds, output tokens): plain decoding at
    k = 0, the run's speculative method drafting k tokens otherwise; seconds from vLLM's own request
    timestamps, as the audit's records."""
    from specaudit.config import RunConfig

    cfg = RunConfig(**(manifest.get("config") or {}))
    section = manifest.get("vllm") or {}
    stored, stops = section.get("llm_kwargs"), section.get("stop_token_ids") or []
    if not stored or CONTROL_ENGINE not in stored or SPECULATIVE_ENGINE not in stored:
        raise InputError("the run folder's manifest has no vllm.llm_kwargs for both engines; re-audit needs a run of `--engines vllm`")
    model = str(stored[CONTROL_ENGINE].get("model", ""))
    if Path(model).is_absolute() and not Path(model).exists():  # a folder the run converted or named; a hub id is vLLM's
        raise InputError(f"the run's target folder {model!r} is not on this machine; mitigate re-runs vLLM where the audit ran")
    run_device, device = (manifest.get("device") or {}).get("type"), engine_device()
    if run_device and run_device != device:
        raise InputError(f"the run was decoded by vLLM on {run_device}, and this vLLM build runs on {device}; re-audit where it ran")
    vllm = import_vllm()
    engines: dict[int, Any] = {}

    def engine(k: int, prompt_ids: list[int]) -> Any:
        if k not in engines:  # as the audit's: warmed up on the first prompt it decodes
            warm_up = (prompt_ids, sampling_kwargs(cfg, cfg.seed, stops, min(8, max_new_tokens)))
            engines[k] = start_engine(vllm, engine_kwargs(stored, k), device, warm_up, cfg.warmup)
        return engines[k]

    def decode(prompt_ids: list[int], k: int, seed: int) -> tuple[float, int]:
        output, wall = generate_alone(vllm, engine(k, prompt_ids), prompt_ids, sampling_kwargs(cfg, seed, stops, max_new_tokens))
        seconds, _, _ = request_timings(output.metrics, wall)
        return seconds, len(output.outputs[0].token_ids)

    return decode
