"""Run configuration: one dataclass, validated on construction, loadable from YAML."""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import yaml

from specaudit.decoding import ENGINES, SamplingSpec
from specaudit.errors import InputError


@dataclass
class RunConfig:
    target: str = "default"
    draft: str = "int8"
    engines: tuple[str, ...] = ("vanilla", "speculative")
    k: int = 4
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    samples: int = 1
    max_new_tokens: int = 48
    prompts: str = "core"
    per_group: int | None = None
    dimensions: tuple[str, ...] | None = None
    column_map: str | None = None
    seed: int = 0
    device: str = "auto"
    dtype: str = "auto"
    threads: int = 1  # CPU threads for torch; see load_pair_for
    executor: str = "local"  # local | ray (specaudit.ray_executor); how the plan runs, not what it decodes
    workers: int | None = None  # Ray actors (default: one per GPU, else one per `threads` CPUs)
    ray_address: str | None = None  # an existing Ray cluster ("auto", "ray://host:10001"); default: start one here
    timing_repeats: int = 0
    warmup: int = 1
    verify: str | None = None  # "module:function" of a user's rejection step, for the speculative engine
    draft_noise: str | None = None  # "dimension=group:sigma": plant a disparity (NoisyDraft) to check an audit's power
    chat_template: bool = True
    endpoint: dict | None = None  # settings of `--engines endpoint` (see specaudit.backends.endpoint)
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.engines, str):
            self.engines = tuple(e.strip() for e in self.engines.split(",") if e.strip())
        if isinstance(self.dimensions, str):
            self.dimensions = tuple(d.strip() for d in self.dimensions.split(",") if d.strip())
        from specaudit.backends import BACKENDS

        unknown = [e for e in self.engines if e not in ENGINES and e not in BACKENDS]
        if unknown or not self.engines:
            raise InputError(f"unknown engine(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(ENGINES)}, "
                             f"or one backend alone ({', '.join(BACKENDS)})")
        backends = [e for e in self.engines if e in BACKENDS]
        if backends and len(self.engines) > 1:
            raise InputError(f"--engines {','.join(self.engines)}: the {backends[0]} backend runs alone (it records vanilla and "
                             f"speculative itself); write --engines {backends[0]}")
        if self.endpoint is not None or self.engines == ("endpoint",):
            from specaudit.backends.endpoint import validate_settings

            self.endpoint = validate_settings(self.endpoint, self.engines)
        for name, value, low in (("k", self.k, 1), ("samples", self.samples, 1), ("max-new-tokens", self.max_new_tokens, 1),
                                 ("timing-repeats", self.timing_repeats, 0), ("warmup", self.warmup, 0),
                                 ("threads", self.threads, 1)):
            if not isinstance(value, int) or value < low:
                raise InputError(f"--{name} must be an integer >= {low}, got {value!r}")
        if self.executor not in ("local", "ray"):
            raise InputError(f"--executor {self.executor!r}: choose local or ray")
        if self.executor == "ray" and any(e not in ENGINES for e in self.engines):
            raise InputError(f"--executor ray runs the local engines ({', '.join(ENGINES)}); a backend in --engines runs on its own")
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 1):
            raise InputError(f"--workers must be an integer >= 1, got {self.workers!r}")
        if self.per_group is not None and self.per_group < 1:
            raise InputError(f"--per-group must be >= 1, got {self.per_group}")
        self.sampling  # validates temperature / top-k / top-p
        if isinstance(self.draft, str) and self.draft.startswith("early-exit") and not self.draft.partition(":")[2].isdigit():
            raise InputError(f"--draft {self.draft!r}: write early-exit:N with N the number of layers to keep, e.g. early-exit:8")
        if self.draft_noise:
            from specaudit.models import parse_draft_noise

            parse_draft_noise(self.draft_noise)
            if "hf-assisted" in self.engines:
                raise InputError("--draft-noise applies to the speculative engine only; drop hf-assisted from --engines")
        if self.draft is None and not backends and any(e != "vanilla" for e in self.engines):
            raise InputError("the speculative engines need a --draft (int8, early-exit:N, ngram, or a model)")

    @property
    def sampling(self) -> SamplingSpec:
        return SamplingSpec(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)

    def to_dict(self) -> dict:
        payload = asdict(self)
        payload["engines"] = list(self.engines)
        payload["dimensions"] = list(self.dimensions) if self.dimensions else None
        if self.endpoint:  # never write an API key into a manifest
            from specaudit.backends.endpoint import public_settings

            payload["endpoint"] = public_settings(self.endpoint)
        return payload

    def decoding_identity(self) -> dict:
        """The settings that decide what records mean: a resumed run must match these exactly."""
        keep = ("target", "draft", "k", "temperature", "top_k", "top_p", "max_new_tokens", "seed", "dtype", "verify", "chat_template", "draft_noise")
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
            raise InputError(f"--verify {self.verify!r} names a {type(function).__name__}, not a function "
                             "verify(draft_tokens, draft_probs, target_probs, generator)")
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


def run_config_from(options: dict, source: str = "options") -> RunConfig:
    known = {f.name for f in fields(RunConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(f"{source}: unknown option(s) {', '.join(unknown)}")
    return RunConfig(**options)
