"""The endpoint section of a run config (`--engines endpoint`, `extra.endpoint`; the old top-level `endpoint:`): its model, its checks, what of it
the manifest may show and what of it decides the records' meaning. Pydantic only, so the run
config checks it before any engine code loads (the registry names this module)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, model_validator

from specaudit._validation import SETTINGS_CONFIG, settings_section, typed_as
from specaudit.engines.levels import check_levels
from specaudit.errors import InputError

if TYPE_CHECKING:
    from specaudit.config import RunConfig
    from specaudit.decoding import SamplingSpec

LOGPROBS_MODES = ("processed", "raw")


class EndpointSettings(BaseModel):
    """The endpoint section of a run config (`--engines endpoint`, `extra.endpoint`), shared by YAML and the API."""

    model_config = SETTINGS_CONFIG

    speculative_url: str | None = None  # base URL of the server with speculative decoding on
    vanilla_url: str | None = None  # ... and off
    model: str | None = None  # default of both model names below
    speculative_model: str | None = None
    vanilla_model: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None  # name of an environment variable holding the key
    concurrency: int = Field(4, ge=1, strict=True)
    # Concurrency as a dimension (engines.levels): the plan once per level, `level` requests in flight
    # per server, the level on each record. None: one pass at `concurrency`, no level recorded.
    concurrency_levels: tuple[int, ...] | None = None
    timeout_s: float = Field(600.0, gt=0, strict=True)
    metrics_url: str | None = None
    logprobs: int = Field(20, ge=0, strict=True)
    logprobs_mode: str = "processed"
    tokenizer: str | None = None
    stream: bool = Field(True, strict=True)
    extra_body: dict = Field(default_factory=dict)
    # token_ids, or text: the prompt ids decoded with special tokens kept, for servers whose
    # completions API takes text only (llama-cpp-python's server; it tokenises special tokens).
    prompt_as: Literal["token_ids", "text"] = "token_ids"
    # mixed traffic (engines.endpoint.mixed): requests at this sampling setting (--sampling's syntax)
    # kept in flight on each server while the plan runs, mix_in_flight at a time, not recorded
    mix_sampling: str | None = None
    mix_in_flight: int = Field(4, ge=1, strict=True)

    @model_validator(mode="after")
    def _rules(self) -> EndpointSettings:
        for name, role in (("speculative_url", "with speculative decoding on"), ("vanilla_url", "with speculative decoding off")):
            if not getattr(self, name):
                raise InputError(
                    f"{typed_as(f'endpoint.{name}')} is missing; give the base URL of the server {role}, e.g. http://127.0.0.1:8000/v1"
                )
            setattr(self, name, _url(getattr(self, name), name))
        if self.metrics_url is not None:
            self.metrics_url = _url(self.metrics_url, "metrics_url")
        self.speculative_model = self.speculative_model or self.model
        self.vanilla_model = self.vanilla_model or self.model
        if self.api_key is not None and self.api_key_env is not None:
            raise InputError("endpoint: give either api_key or api_key_env (the name of an environment variable holding the key), not both")
        if self.concurrency_levels is not None:
            if self.concurrency != type(self).model_fields["concurrency"].default:  # a dumped section holds the default
                raise InputError("endpoint: give either concurrency (one pass) or concurrency_levels (the plan once per level), not both")
            check_levels(self.concurrency_levels, "endpoint.concurrency_levels")
        if self.mix_sampling is not None:
            mix_setting(self.mix_sampling)
        if self.logprobs_mode not in LOGPROBS_MODES:
            raise InputError(f"endpoint.logprobs_mode must be one of {', '.join(LOGPROBS_MODES)}, got {self.logprobs_mode!r}")
        return self


DEFAULTS: dict[str, Any] = {name: info.get_default(call_default_factory=True) for name, info in EndpointSettings.model_fields.items()}
# Settings that decide what the records mean: a resumed run must keep them.
_IDENTITY = (
    "speculative_url",
    "vanilla_url",
    "speculative_model",
    "vanilla_model",
    "logprobs",
    "logprobs_mode",
    "tokenizer",
    "extra_body",
    "prompt_as",
    "concurrency_levels",
    "mix_sampling",
    "mix_in_flight",
)


def mix_setting(text: str) -> SamplingSpec:
    """`endpoint.mix_sampling` as a sampling setting, or an InputError naming it as the user gave it."""
    from specaudit.decoding.settings import parse_setting

    try:
        return parse_setting(text)
    except InputError as err:
        raise InputError(f"{typed_as('endpoint.mix_sampling')}: {str(err).removeprefix('--sampling ')}") from None


def _url(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise InputError(
            f"{typed_as(f'endpoint.{name}')} {value!r} is not an http(s) URL; write the server's base URL such as http://127.0.0.1:8000/v1"
        )
    return value.rstrip("/")


def validate_settings(section: dict | None, cfg: RunConfig) -> dict:
    """The endpoint section of a run config (`extra.endpoint`), checked and completed with defaults (idempotent)."""
    if tuple(cfg.engines) != ("endpoint",):
        raise InputError(
            f"the config has an endpoint section but --engines is {','.join(cfg.engines)}; write --engines endpoint to audit a live server"
        )
    if section is None:
        raise InputError(
            "--engines endpoint needs the servers: --speculative-url URL --vanilla-url URL, or an `extra: {endpoint: ...}` section "
            "in the config file with speculative_url and vanilla_url (docs/servers.md)"
        )
    if cfg.dtype != "auto":
        raise InputError(f"--dtype {cfg.dtype} cannot apply with --engines endpoint: the servers decode in their own dtype; drop --dtype")
    return settings_section(section, EndpointSettings, "endpoint", levels="concurrency_levels").model_dump()


def public_settings(section: dict) -> dict:
    """The settings as written into manifest.json: an API key never is."""
    return {**section, "api_key": "<redacted>" if section.get("api_key") else None}


def settings_identity(section: dict) -> dict:
    return {"endpoint": {name: section.get(name) for name in _IDENTITY}}


def concurrency_levels(section: dict) -> tuple[int, ...]:
    """The levels the plan runs at; () for one pass at `concurrency`."""
    return tuple(section.get("concurrency_levels") or ())


def with_concurrency(section: dict, levels: tuple[int, ...]) -> dict:
    """`--concurrency`: one level is one pass at that load (no level recorded), several the plan once per level."""
    if len(levels) == 1:
        return {**section, "concurrency": levels[0], "concurrency_levels": None}
    return {**section, "concurrency": DEFAULTS["concurrency"], "concurrency_levels": levels}  # levels require the default


# How long the dry run waits for a server: long enough for one that is up, short enough to fail fast.
DRY_RUN_WAIT_S = 10.0


def plan_line(cfg: RunConfig) -> str:
    """What `--dry-run` says of the models: the servers hold them, checked as the run checks them
    first (engines.endpoint.client.open_servers: the API key's variable is set, both servers answer
    and serve the model, waiting DRY_RUN_WAIT_S at most); an InputError (exit 2) otherwise."""
    from specaudit.engines.endpoint.client import open_servers

    section = cfg.engine_settings("endpoint")
    endpoints, models, _ = open_servers(section, timeout_s=DRY_RUN_WAIT_S)
    for server in endpoints.values():
        server.close()
    return (
        f"servers: speculation on {section['speculative_url']} ({models['speculative']}), off {section['vanilla_url']} "
        f"({models['vanilla']}), both answered; tokenizer {cfg.target}"
    )


def preflight(settings: dict) -> None:
    """What is checked before anything loads: the API key's variable (unset fails now, not after torch loads)."""
    from specaudit.engines.endpoint.client import api_key_of

    api_key_of(settings)


# ----------------------------------------------------------------------------- HTTP
