"""Run configuration: one pydantic model for flags and YAML alike, validated on construction."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specaudit._validation import input_error
from specaudit.decoding import ENGINES, SamplingSpec
from specaudit.errors import InputError


def _flag(field: str) -> str:
    return f"--{field.replace('_', '-')}"


class RunConfig(BaseModel):
    """The settings of a run, from flags or a YAML file alike: checked on construction (types and
    ranges by pydantic, the rules between settings below); bad values are an InputError."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=False)

    target: str = "default"
    draft: str | None = "int8"
    engines: tuple[str, ...] = ("vanilla", "speculative")
    k: int = Field(4, ge=1, strict=True)
    temperature: float = Field(1.0, strict=True)
    top_k: int = Field(0, strict=True)
    top_p: float = Field(1.0, strict=True)
    samples: int = Field(1, ge=1, strict=True)
    max_new_tokens: int = Field(48, ge=1, strict=True)
    prompts: str = "core"
    per_group: int | None = Field(None, ge=1, strict=True)
    dimensions: tuple[str, ...] | None = None
    column_map: str | None = None
    seed: int = Field(0, strict=True)
    # Which prompts --per-group draws; apart from the decoding seed, so re-runs with new decoding
    # seeds (a monitoring history) audit the same prompts.
    sample_seed: int = Field(0, strict=True)
    device: str = "auto"
    dtype: str = "auto"
    threads: int = Field(1, ge=1, strict=True)  # CPU threads for torch; see execution.decode.load_pair_for
    executor: str = "local"  # local | ray (specaudit.execution.ray); how the plan runs, not what it decodes
    workers: int | None = Field(None, ge=1, strict=True)  # Ray actors (default: one per GPU, else one per `threads` CPUs)
    ray_address: str | None = None  # an existing Ray cluster ("auto", "ray://host:10001"); default: start one here
    timing_repeats: int = Field(0, ge=0, strict=True)
    warmup: int = Field(1, ge=0, strict=True)
    verify: str | None = None  # "module:function" of a user's rejection step, for the speculative engine
    draft_noise: str | None = None  # "dimension=group:sigma": plant a disparity (NoisyDraft) to check an audit's power
    chat_template: bool = Field(True, strict=True)
    endpoint: dict | None = None  # settings of `--engines endpoint` (specaudit.backends.endpoint.EndpointSettings)
    extra: dict = Field(default_factory=dict)

    def __init__(self, **options: Any) -> None:
        try:
            super().__init__(**options)
        except ValidationError as err:
            raise input_error(err, RunConfig, _flag, lambda names: f"unknown option(s) {', '.join(names)}") from None

    @field_validator("engines", "dimensions", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @model_validator(mode="after")
    def _rules(self) -> RunConfig:
        from specaudit.backends import BACKENDS

        unknown = [e for e in self.engines if e not in ENGINES and e not in BACKENDS]
        if unknown or not self.engines:
            raise InputError(
                f"unknown engine(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(ENGINES)}, "
                f"or one backend alone ({', '.join(BACKENDS)})"
            )
        backends = [e for e in self.engines if e in BACKENDS]
        if backends and len(self.engines) > 1:
            raise InputError(
                f"--engines {','.join(self.engines)}: the {backends[0]} backend runs alone (it records vanilla and "
                f"speculative itself); write --engines {backends[0]}"
            )
        if self.endpoint is not None or self.engines == ("endpoint",):
            from specaudit.backends.endpoint import validate_settings

            self.endpoint = validate_settings(self.endpoint, self.engines)
        if self.executor not in ("local", "ray"):
            raise InputError(f"--executor {self.executor!r}: choose local or ray")
        if self.executor == "ray" and any(e not in ENGINES for e in self.engines):
            raise InputError(f"--executor ray runs the local engines ({', '.join(ENGINES)}); a backend in --engines runs on its own")
        SamplingSpec(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)  # its checks: temperature, top-k, top-p
        if isinstance(self.draft, str) and self.draft.startswith("early-exit") and not self.draft.partition(":")[2].isdigit():
            raise InputError(f"--draft {self.draft!r}: write early-exit:N with N the number of layers to keep, e.g. early-exit:8")
        if self.draft_noise:
            from specaudit.models import parse_draft_noise

            parse_draft_noise(self.draft_noise)
            if "hf-assisted" in self.engines:
                raise InputError("--draft-noise applies to the speculative engine only; drop hf-assisted from --engines")
        if self.draft is None and not backends and any(e != "vanilla" for e in self.engines):
            raise InputError("the speculative engines need a --draft (int8, early-exit:N, ngram, or a model)")
        return self

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with `changes` applied and checked again."""
        return RunConfig(**{**self.model_dump(), **changes})

    @property
    def sampling(self) -> SamplingSpec:
        return SamplingSpec(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)

    def to_dict(self) -> dict:
        payload = self.model_dump()
        payload["engines"] = list(self.engines)
        payload["dimensions"] = list(self.dimensions) if self.dimensions else None
        if self.endpoint:  # never write an API key into a manifest
            from specaudit.backends.endpoint import public_settings

            payload["endpoint"] = public_settings(self.endpoint)
        return payload

    def decoding_identity(self) -> dict:
        """The settings that decide what records mean: a resumed run must match these exactly."""
        keep = (
            "target",
            "draft",
            "k",
            "temperature",
            "top_k",
            "top_p",
            "max_new_tokens",
            "seed",
            "dtype",
            "verify",
            "chat_template",
            "draft_noise",
        )
        identity = {name: getattr(self, name) for name in keep}
        if self.endpoint:
            from specaudit.backends.endpoint import settings_identity

            identity["endpoint"] = settings_identity(self.endpoint)
        return identity

    def load_verify(self):
        """The rejection step for the speculative engine: ours, or `module:function` of the user's."""
        from specaudit.decoding import reference_verify

        if not self.verify:
            return reference_verify
        module_name, _, function_name = self.verify.partition(":")
        try:
            function = getattr(importlib.import_module(module_name), function_name)
        except (ImportError, AttributeError, ValueError):
            raise InputError(f"--verify {self.verify!r}: cannot import it; write module.path:function_name") from None
        if not callable(function):
            raise InputError(
                f"--verify {self.verify!r} names a {type(function).__name__}, not a function "
                "verify(draft_tokens, draft_probs, target_probs, generator)"
            )
        return function


def load_config_file(path: str | Path) -> dict:
    """Read a YAML (or JSON) config file into a dict of option names (dashes or underscores)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"config file {path} does not exist")
    try:
        payload = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark else ""
        raise InputError(f"config file {path}{where} is not valid YAML") from None
    if not isinstance(payload, dict):
        raise InputError(f"config file {path} must hold a mapping of option: value")
    return {key.replace("-", "_"): value for key, value in payload.items()}


RUN_OPTIONS = tuple(RunConfig.model_fields)  # the option names of flags and config files


def run_config_from(options: dict, source: str = "options") -> RunConfig:
    known = set(RUN_OPTIONS)
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(f"{source}: unknown option(s) {', '.join(unknown)}")
    return RunConfig(**options)
