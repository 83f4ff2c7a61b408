"""The `llama_server` settings of a run (`--engines llama-server`), read from the run config's
`extra.llama_server` mapping; pydantic only, checked before any server starts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specaudit._validation import settings_section
from specaudit.engines.levels import check_levels
from specaudit.errors import InputError

# llama-server's draft-free speculation types (common/speculative.cpp in the vendored llama.cpp);
# --draft ngram picks ngram-simple unless `spec_type` names another.
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
SPEC_TYPES = ("draft-simple", *NGRAM_TYPES)
NGRAM_LOOKUP = 3  # n-gram length looked up in the context, as the in-process engine's longest n-gram

if TYPE_CHECKING:
    from specaudit.config import RunConfig


class LlamaServerSettings(BaseModel):
    """How specaudit starts and drives the two llama-server processes."""

    model_config = ConfigDict(extra="forbid")

    # The plan runs once per level: `level` requests in flight at a time, each on its own slot.
    concurrency_levels: tuple[int, ...] = (1, 4)
    parallel: int | None = Field(None, ge=1, strict=True)  # -np: slots per server (default: the highest level)
    ctx_per_slot: int = Field(1024, ge=64, strict=True)  # -c is this x parallel: llama-server splits it across slots
    threads: int = Field(2, ge=1, strict=True)  # -t and -tb
    spec_type: Literal[SPEC_TYPES] | None = None  # None: draft-simple with a GGUF draft, ngram-simple with --draft ngram
    startup_timeout_s: float = Field(300.0, gt=0, strict=True)  # until /health answers 200
    request_timeout_s: float = Field(600.0, gt=0, strict=True)
    lifetime_s: float = Field(3600.0, gt=0, strict=True)  # the server is killed after this long, whatever happens
    extra_args: tuple[str, ...] = ()  # more llama-server flags, for both processes
    # n_probs: the server's logprob of every emitted token (and the top-N) for the logprob parity
    # check (analysis.logprob_parity); 0 turns it off.
    logprobs: int = Field(1, ge=0, strict=True)

    @model_validator(mode="after")
    def _rules(self) -> LlamaServerSettings:
        check_levels(self.concurrency_levels, "llama_server.concurrency_levels")
        if self.parallel is not None and self.parallel < max(self.concurrency_levels):
            raise InputError(
                f"llama_server.parallel {self.parallel} is below the highest concurrency level {max(self.concurrency_levels)}: "
                "requests would queue for a slot instead of running together; raise it or drop the level"
            )
        return self

    @property
    def slots(self) -> int:
        return self.parallel or max(self.concurrency_levels)


DEFAULTS: dict[str, Any] = {name: info.get_default(call_default_factory=True) for name, info in LlamaServerSettings.model_fields.items()}


def server_settings(extra: dict | None) -> LlamaServerSettings:
    """The run's llama_server settings (its config's `extra: {llama_server: {...}}`), checked."""
    return settings_section((extra or {}).get("llama_server") or {}, LlamaServerSettings, "llama_server", levels="concurrency_levels")


def validate_settings(section: dict | None, cfg: RunConfig) -> dict | None:
    """The run config's `extra.llama_server`, checked as it is constructed; kept as given."""
    server_settings({"llama_server": section})
    return section


def concurrency_levels(section: dict | None) -> tuple[int, ...]:
    return server_settings({"llama_server": section}).concurrency_levels


def with_concurrency(section: dict | None, levels: tuple[int, ...]) -> dict:
    """`--concurrency`: the plan once per level."""
    return {**(section or {}), "concurrency_levels": levels}


def spec_type_for(draft: str, settings: LlamaServerSettings) -> str:
    """The --spec-type of the spec-ON server for the run's --draft."""
    wanted = settings.spec_type
    if draft == "ngram":
        if wanted == "draft-simple":
            raise InputError("llama_server.spec_type draft-simple needs a GGUF --draft, not ngram")
        return wanted or "ngram-simple"
    if wanted is not None and wanted != "draft-simple":
        raise InputError(
            f"llama_server.spec_type {wanted} drafts from n-grams; write --draft ngram with it (the --draft {draft!r} would be unused)"
        )
    return "draft-simple"
