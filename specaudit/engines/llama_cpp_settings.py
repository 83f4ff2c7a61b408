"""The `llama_cpp` settings of a run: the run config's `extra.llama_cpp` section, llama.cpp in this
process (context, threads, batch); pydantic only, checked when the run config is built.

Shared: `--engines llama-cpp` decodes with them, and `--engines llama-speculative` runs its control
(llama.cpp's plain decoding in process) with them; both registry entries name this module. Its
context is sized to the run's prompts later, once they are tokenised (llama_cpp_runtime.sized_settings).
The section is kept as the user gave it: the decoding identity of a run folder never held it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from specaudit._validation import SETTINGS_CONFIG, settings_section
from specaudit.errors import InputError

if TYPE_CHECKING:
    from specaudit.config import RunConfig

SECTION = "llama_cpp"
DEFAULT_CONTEXT = 2048
# what a generation needs past its output: the k tokens the draft hook proposes beyond the last one,
# and a few positions of slack, so a budget that cannot fit is refused before anything loads
CONTEXT_SLACK = 8


class LlamaCppSettings(BaseModel):
    """`extra.llama_cpp` of a run: context, threads and batch of the in-process llama.cpp."""

    model_config = SETTINGS_CONFIG

    n_ctx: int = Field(DEFAULT_CONTEXT, ge=1, strict=True)  # unset: sized to the longest prompt
    n_threads: int | None = Field(None, ge=1, strict=True)  # None: --threads
    n_batch: int = Field(512, ge=1, strict=True)
    draft_threads: int | None = Field(None, ge=1, strict=True)  # None: --threads


def llama_cpp_settings(extra: dict[str, Any] | None) -> LlamaCppSettings:
    """The run's llama_cpp settings (its config's `extra: {llama_cpp: {...}}`), checked."""
    return settings_section((extra or {}).get(SECTION) or {}, LlamaCppSettings, f"extra.{SECTION}")


def validate_settings(section: dict | None, cfg: RunConfig) -> dict | None:
    """The run config's `extra.llama_cpp`, checked as it is constructed (an explicit n_ctx must hold
    the run's --max-new-tokens); kept as given."""
    settings = llama_cpp_settings({SECTION: section})
    if "n_ctx" in settings.model_fields_set and cfg.max_new_tokens + cfg.k + CONTEXT_SLACK > settings.n_ctx:
        raise InputError(
            f"--max-new-tokens {cfg.max_new_tokens} does not fit llama.cpp's context of {settings.n_ctx} tokens; "
            f"raise extra.{SECTION}.n_ctx"
        )
    return section


def context_is_explicit(cfg: RunConfig) -> bool:
    """Whether the run names llama.cpp's context (n_ctx, however spelled) rather than leaving it sized."""
    return "n_ctx" in llama_cpp_settings(cfg.extra).model_fields_set


def backend_settings(cfg: RunConfig) -> dict:
    """`extra.llama_cpp` of the run (n_ctx, n_threads, n_batch, draft_threads), with defaults:
    threads = --threads, context = 2048 tokens."""
    settings = llama_cpp_settings(cfg.extra).model_dump()
    return {**settings, "n_threads": settings["n_threads"] or cfg.threads, "draft_threads": settings["draft_threads"] or cfg.threads}


__all__ = [
    "DEFAULT_CONTEXT",
    "LlamaCppSettings",
    "backend_settings",
    "context_is_explicit",
    "llama_cpp_settings",
    "validate_settings",
]
