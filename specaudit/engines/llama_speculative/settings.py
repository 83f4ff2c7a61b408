"""The `llama_speculative` settings of a run (`--engines llama-speculative`), read from the run
config's `extra.llama_speculative` mapping; pydantic only, checked before anything runs.

The tree's shape is llama.cpp's: `n_parallel` (`-np`) draft sequences at most, a new one opened
where an alternative draft candidate's probability exceeds `p_split` (`--draft-p-split`); its
depth is the run's `--k` (`--draft-max`). `n_parallel` 1 is a chain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from specaudit._validation import settings_section

# -np 1 (a chain) and llama.cpp's own --draft-p-split default (common_params_speculative: 0.1)
DEFAULT_N_PARALLEL = 1
DEFAULT_P_SPLIT = 0.1

if TYPE_CHECKING:
    from specaudit.config import RunConfig


class LlamaSpeculativeSettings(BaseModel):
    """How specaudit runs the `llama-speculative` binary."""

    model_config = ConfigDict(extra="forbid")

    n_parallel: int = Field(DEFAULT_N_PARALLEL, ge=1, le=16, strict=True)  # -np: tree branches at most
    p_split: float = Field(DEFAULT_P_SPLIT, ge=0.0, le=1.0)  # --draft-p-split
    ctx: int | None = Field(None, ge=64, strict=True)  # -c (None: the longest prompt + budget + k, rounded up to 256)
    threads: int | None = Field(None, ge=1, strict=True)  # -t and -td (None: --threads)
    timeout_s: float = Field(600.0, gt=0)  # one process (one record): killed past this
    extra_args: tuple[str, ...] = ()  # more llama-speculative flags, after specaudit's


DEFAULTS: dict[str, Any] = {
    name: info.get_default(call_default_factory=True) for name, info in LlamaSpeculativeSettings.model_fields.items()
}


def speculative_settings(extra: dict | None) -> LlamaSpeculativeSettings:
    """The run's llama_speculative settings (its config's `extra: {llama_speculative: {...}}`), checked."""
    return settings_section((extra or {}).get("llama_speculative") or {}, LlamaSpeculativeSettings, "llama_speculative")


def validate_settings(section: dict | None, cfg: RunConfig) -> dict | None:
    """The run config's `extra.llama_speculative`, checked as it is constructed; kept as given."""
    speculative_settings({"llama_speculative": section})
    return section


__all__ = ["DEFAULTS", "DEFAULT_N_PARALLEL", "DEFAULT_P_SPLIT", "LlamaSpeculativeSettings", "speculative_settings"]
