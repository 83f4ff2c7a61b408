"""The `openvino` settings of a run (`--engines openvino`), read from the run config's
`extra.openvino` mapping; pydantic only, checked before anything loads.

Every setting that decides OpenVINO's numbers is passed to the runtime explicitly and recorded in
the manifest: "default" is resolved to the value OpenVINO's CPU plugin reports on this machine (it
picks bf16 inference where the CPU has AVX-512 BF16 or AMX, f32 elsewhere), so a run says which
precision it ran at, and the same run on another machine either pins the same or says it differs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specaudit._validation import settings_section
from specaudit.engines.levels import check_levels

INFERENCE_PRECISIONS = ("default", "f32", "bf16", "f16")
KV_CACHE_PRECISIONS = ("default", "u8", "u4", "f16", "bf16", "f32")

if TYPE_CHECKING:
    from specaudit.config import RunConfig


class OpenVinoSettings(BaseModel):
    """How specaudit drives OpenVINO GenAI's pipelines."""

    model_config = ConfigDict(extra="forbid")

    # LLMPipeline's own default is on (its latency-oriented scheduler); off audits the other state
    prefix_caching: bool = Field(True, strict=True)
    inference_precision: Literal[INFERENCE_PRECISIONS] = "default"  # INFERENCE_PRECISION_HINT
    kv_cache_precision: Literal[KV_CACHE_PRECISIONS] = "default"  # KV_CACHE_PRECISION
    # DYNAMIC_QUANTIZATION_GROUP_SIZE: the CPU plugin quantises activations of compressed-weight
    # layers on the fly (32 by default); 0 turns it off. None: the plugin's default, recorded.
    dynamic_quantization_group_size: int | None = Field(None, ge=0, strict=True)
    threads: int | None = Field(None, ge=1, strict=True)  # INFERENCE_NUM_THREADS (default: --threads)
    # The draft's own precision where it should differ from the target's (None: the same): with
    # --draft target, a draft at f32 beside a bf16 target is the target up to rounding (q ~ p)
    draft_inference_precision: Literal[INFERENCE_PRECISIONS] | None = None
    draft_kv_cache_precision: Literal[KV_CACHE_PRECISIONS] | None = None
    # The GGUF's IR is written once into the cache; a folder with openvino_model.xml overrides it
    target_ir: str | None = None
    draft_ir: str | None = None
    # Above 1, the plan runs once per level with `level` requests in flight in one continuous-batching
    # pipeline (engines/openvino/batching.py); (1,) keeps one request per generate call, no level recorded
    concurrency_levels: tuple[int, ...] = (1,)

    @model_validator(mode="after")
    def _levels(self) -> OpenVinoSettings:
        check_levels(self.concurrency_levels, "extra.openvino.concurrency_levels")
        return self

    @property
    def batched(self) -> bool:
        return self.concurrency_levels != (1,)


DEFAULTS: dict[str, Any] = {name: info.get_default(call_default_factory=True) for name, info in OpenVinoSettings.model_fields.items()}


def openvino_settings(extra: dict | None) -> OpenVinoSettings:
    """The run's openvino settings (its config's `extra: {openvino: {...}}`), checked."""
    return settings_section((extra or {}).get("openvino") or {}, OpenVinoSettings, "extra.openvino", levels="concurrency_levels")


def validate_settings(section: dict | None, cfg: RunConfig) -> dict | None:
    """The run config's `extra.openvino`, checked as it is constructed; kept as given."""
    openvino_settings({"openvino": section})
    return section


def concurrency_levels(section: dict | None) -> tuple[int, ...]:
    """The levels of a batched run; () for one request per generate call."""
    settings = openvino_settings({"openvino": section})
    return settings.concurrency_levels if settings.batched else ()


def with_concurrency(section: dict | None, levels: tuple[int, ...]) -> dict:
    """`--concurrency`: the plan once per level, in one continuous-batching pipeline."""
    return {**(section or {}), "concurrency_levels": levels}


__all__ = ["DEFAULTS", "INFERENCE_PRECISIONS", "KV_CACHE_PRECISIONS", "OpenVinoSettings", "openvino_settings"]
