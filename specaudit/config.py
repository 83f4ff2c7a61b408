"""The settings models, one place for flags and YAML alike, each validated on construction.

RunConfig (what a run decodes), AnalysisSettings (what `analyze` tests and measures, an audit
config's `analysis:` section) and GateThresholds (what the gate demands, its `gate:` section); the
endpoint backend's settings are specaudit.engines.endpoint.settings.EndpointSettings. Bad values are the
one-sentence InputError of specaudit._validation.input_error, naming the field as the user wrote it.
"""

from __future__ import annotations

import importlib
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specaudit._validation import SETTINGS_CONFIG, did_you_mean, input_error, seed_field, sentence_error, typed_as
from specaudit.contracts import DEFAULT_BAND, MIN_CHECKED_PROMPTS, CheckStatus
from specaudit.contracts.engines import (
    BACKENDS,
    ENGINE_OPTIONS,
    ENGINES,
    LOCAL_ENGINES,
    LOCAL_EXECUTORS,
    backend_of,
    engine_settings,
    feature_refusal,
    prefix_cache_refusal,
    resolve,
)
from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE, SPECULATIVE_ENGINE
from specaudit.decoding import SamplingSpec
from specaudit.errors import InputError

if TYPE_CHECKING:
    from specaudit.decoding.verify import VerifyFn


class RunConfig(BaseModel):
    """The settings of a run, from flags or a YAML file alike: checked on construction (types and
    ranges by pydantic, the rules between settings below); bad values are an InputError."""

    model_config = ConfigDict(**SETTINGS_CONFIG, arbitrary_types_allowed=False)

    target: str = "default"
    draft: str | None = "int8"
    engines: tuple[str, ...] = (CONTROL_ENGINE, SPECULATIVE_ENGINE)
    k: int = Field(4, ge=1, strict=True)
    temperature: float = Field(1.0, strict=True)
    top_k: int = Field(0, strict=True)
    top_p: float = Field(1.0, strict=True)
    # Request features that change the target's distribution (docs/request-features.md); their
    # values are checked by decoding.SamplingSpec, their semantics are decoding.warping's.
    min_p: float = Field(0.0, strict=True)
    repetition_penalty: float = Field(1.0, strict=True)
    presence_penalty: float = Field(0.0, strict=True)
    frequency_penalty: float = Field(0.0, strict=True)
    repeat_last_n: int = Field(0, strict=True)
    logit_bias: dict[int, float] = Field(default_factory=dict)
    stop: tuple[str, ...] = ()
    grammar: str = ""  # the text of a JSON schema or GBNF grammar (--sampling grammar=FILE reads it)
    samples: int = Field(1, ge=1, strict=True)
    max_new_tokens: int = Field(32, ge=1, strict=True)  # one default for run, audit and monitor run
    prompts: str = "core"
    per_group: int | None = Field(None, ge=1, strict=True)
    dimensions: tuple[str, ...] | None = None
    column_map: str | None = None
    seed: int = seed_field(description="the run's decoding seed")
    # Which prompts --per-group draws; apart from the decoding seed, so re-runs with new decoding
    # seeds (a monitoring history) audit the same prompts.
    sample_seed: int = seed_field(description="the seed of the --per-group sample")
    device: str = "auto"
    dtype: str = "auto"
    threads: int = Field(1, ge=1, strict=True)  # CPU threads for torch; see execution.decode.load_pair_for
    executor: str = "local"  # local | ray (specaudit.engines.ray); how the plan runs, not what it decodes
    workers: int | None = Field(None, ge=1, strict=True)  # Ray actors (default: one per GPU, else one per `threads` CPUs)
    ray_address: str | None = None  # an existing Ray cluster ("auto", "ray://host:10001"); default: start one here
    # With the screen and engines in one run (`--engines screen,vanilla,speculative`) the engines
    # decode only a stratified subset of the screened prompts: one per group (whole pairs), or at
    # most this many of those (execution.plan.engine_subset).
    engine_prompts: int | None = Field(None, ge=1, strict=True)
    timing_repeats: int = Field(0, ge=0, strict=True)
    warmup: int = Field(1, ge=0, strict=True)
    # engine faults in a row that stop the run (execution.faults): an engine that fails that often is down
    max_consecutive_faults: int = Field(5, ge=1, strict=True)
    verify: str | None = None  # "module:function" of a user's rejection step, for the speculative engine
    plant_disparity: str | None = (
        None  # "dimension=group:factor": plant a known disparity (models.DisparityPlant) to check an audit's power
    )
    chat_template: bool = Field(True, strict=True)
    # `--prefix-cache cold,warm`: the plan once per cache state, the state on each record (served
    # engines only; contracts.run.PREFIX_CACHE_STATES, docs/request-features.md "Prefix caching")
    prefix_cache: tuple[str, ...] | None = None
    # the engines' settings sections (`extra.<engine>`, e.g. extra.endpoint, extra.tree, extra.llama_server:
    # each checked by the module its registry entry names) and the screen's own keys (screen_threads, ...)
    extra: dict = Field(default_factory=dict)

    def __init__(self, **options: Any) -> None:
        try:
            super().__init__(**options)
        except ValidationError as err:
            raise input_error(err, RunConfig, typed_as, lambda names: f"unknown option(s) {', '.join(names)}") from None

    @model_validator(mode="before")
    @classmethod
    def _engine_options(cls, data: Any) -> Any:
        """Top-level options that are an engine's settings (the flags --tree, --levels, ...; the
        server flags' endpoint section; old config keys) go into its section, winning over it."""
        if not isinstance(data, dict) or not ENGINE_OPTIONS.keys() & data.keys():
            return data
        data = dict(data)
        extra = data.get("extra") if data.get("extra") is not None else {}
        if not isinstance(extra, dict):
            return data  # refused as the field's type
        extra = dict(extra)
        for option in ENGINE_OPTIONS.keys() & data.keys():
            value = data.pop(option)
            if value is not None:
                extra[ENGINES[ENGINE_OPTIONS[option][0]].section] = engine_settings(
                    {option: value, "extra": extra}, ENGINE_OPTIONS[option][0]
                )
        data["extra"] = extra
        return data

    @field_validator("engines", "dimensions", "prefix_cache", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @model_validator(mode="after")
    def _rules(self) -> RunConfig:
        unknown = [e for e in self.engines if e not in ENGINES]
        if unknown or not self.engines:
            raise InputError(
                f"unknown engine(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(LOCAL_ENGINES)}, "
                f"or one backend alone ({', '.join(BACKENDS)}){did_you_mean(unknown[0], ENGINES) if unknown else ''}"
            )
        backend = backend_of(self.engines)
        screens = [name for name, spec in ENGINES.items() if spec.screens]
        if SCREEN_ENGINE in self.engines and ((backend and not backend.screens) or self.executor != "local"):
            raise InputError(
                f"--engines {','.join(self.engines)}: the screen runs with the local engines "
                f"({', '.join(LOCAL_ENGINES)}) or beside {' or '.join(screens)}, and with --executor local"
            )
        beside_screen = backend is not None and backend.screens and set(self.engines) == {SCREEN_ENGINE, backend.name}
        if backend and len(self.engines) > 1 and not beside_screen:
            raise InputError(
                f"--engines {','.join(self.engines)}: the {backend.name} backend runs alone (it records vanilla and "
                f"speculative itself); write --engines {backend.name}"
            )
        if backend and backend.default_draft and "draft" not in self.model_fields_set:
            self.draft = backend.default_draft
        running = {name for engine in self.engines for name in (engine, *ENGINES[engine].reads_settings_of)}
        for name, spec in ENGINES.items():  # each engine's section, checked by its own module
            if spec.settings and (name in running or self.extra.get(spec.section) is not None):
                section = resolve(spec.settings).validate_settings(self.extra.get(spec.section), self)
                if section is not None:
                    self.extra[spec.section] = section
        if self.engine_prompts is not None and SCREEN_ENGINE not in self.engines:
            raise InputError(
                f"--engine-prompts {self.engine_prompts} caps the screened prompts the engines also decode, and --engines "
                f"{','.join(self.engines)} has no screen; add screen to --engines or drop --engine-prompts"
            )
        if self.executor not in LOCAL_EXECUTORS:
            raise InputError(f"--executor {self.executor!r}: choose {' or '.join(LOCAL_EXECUTORS)}")
        if self.executor == "ray" and any(e not in LOCAL_ENGINES for e in self.engines):
            raise InputError(f"--executor ray runs the local engines ({', '.join(LOCAL_ENGINES)}); a backend in --engines runs on its own")
        refusal = feature_refusal(self.engines, self.sampling.features)  # also checks every sampling value
        if refusal:
            raise InputError(refusal)
        if self.prefix_cache is not None:
            self._check_prefix_cache()
        if isinstance(self.draft, str) and self.draft.startswith("early-exit") and not self.draft.partition(":")[2].isdigit():
            raise InputError(f"--draft {self.draft!r}: write early-exit:N with N the number of layers to keep, e.g. early-exit:8")
        if self.plant_disparity is not None:  # "" is a mistake to name, not "no plant"
            from specaudit.models import DisparityPlant

            DisparityPlant.parse(self.plant_disparity)
            if not {SPECULATIVE_ENGINE, SCREEN_ENGINE} & set(self.engines):
                raise InputError(
                    f"--plant-disparity plants into the speculative engine and the screen, and --engines {','.join(self.engines)} "
                    "runs neither; add speculative to --engines or drop --plant-disparity"
                )
            unplanted = [name for name in self.engines if not ENGINES[name].plants]
            if unplanted:
                raise InputError(
                    f"--plant-disparity applies to the speculative engine and the screen only; drop {', '.join(unplanted)} from --engines"
                )
            if self.draft == "ngram":
                raise InputError("--plant-disparity mixes a draft model's distribution, and the ngram draft has none; use a model draft")
        if self.draft is None and not backend and any(e != CONTROL_ENGINE for e in self.engines):
            raise InputError("the speculative engines need a --draft (int8, early-exit:N, ngram, or a model)")
        return self

    def _check_prefix_cache(self) -> None:
        from specaudit.contracts.run import PREFIX_CACHE_STATES

        states = self.prefix_cache
        wrong = [s for s in states if s not in PREFIX_CACHE_STATES]
        if not states or wrong or len(set(states)) != len(states):
            raise InputError(f"--prefix-cache takes cold, warm or cold,warm (each state once), got {','.join(states) or 'nothing'}")
        refusal = prefix_cache_refusal(self.engines, states)
        if refusal:
            raise InputError(refusal)

    def engine_settings(self, engine: str) -> dict:
        """The settings section of `engine` (`extra.<section>`, as its module checked it), {} without one."""
        return dict(self.extra.get(ENGINES[engine].section) or {})

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with `changes` applied and checked again."""
        return RunConfig(**{**self.model_dump(), **changes})

    def with_setting(self, spec: SamplingSpec) -> RunConfig:
        """A copy at `spec`: its temperature, top-k, top-p and request features, nothing else changed."""
        return self.replace(**{**vars(spec), "logit_bias": dict(spec.logit_bias)})

    @property
    def sampling(self) -> SamplingSpec:
        return SamplingSpec(
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            repetition_penalty=self.repetition_penalty,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            repeat_last_n=self.repeat_last_n,
            logit_bias=tuple(self.logit_bias.items()),
            stop=self.stop,
            grammar=self.grammar,
        )

    def to_dict(self) -> dict:
        payload = self.model_dump()
        payload["engines"] = list(self.engines)
        payload["dimensions"] = list(self.dimensions) if self.dimensions else None
        if self.prefix_cache is None:  # manifests of runs without the axis stay as they were
            payload.pop("prefix_cache")
        else:
            payload["prefix_cache"] = list(self.prefix_cache)
        for spec in ENGINES.values():  # a section as the manifest may show it (an API key never is)
            module = resolve(spec.settings) if spec.settings and self.extra.get(spec.section) is not None else None
            if module is not None and hasattr(module, "public_settings"):
                payload["extra"][spec.section] = module.public_settings(self.extra[spec.section])
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
            "plant_disparity",
        )
        identity = {name: getattr(self, name) for name in keep}
        identity.update(self.sampling.features)  # only those set: a run without them keeps its identity
        # an engine's settings join the identity only where it runs (under the names run folders have
        # always recorded), so older run folders still resume
        for name in self.engines:
            spec = ENGINES[name]
            module = resolve(spec.settings) if spec.settings else None
            if module is not None and hasattr(module, "settings_identity"):
                identity.update(module.settings_identity(self.extra[spec.section]))
        if self.prefix_cache is not None:  # only where set: runs without it keep their identity
            identity["prefix_cache"] = list(self.prefix_cache)
        return identity

    def load_verify(self) -> VerifyFn:
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


class _SectionSettings(BaseModel):
    """A settings section of an audit config: constructing one names a bad field `SECTION.field`;
    `parse` names it as the caller says (a flag, a bare key)."""

    model_config = ConfigDict(**SETTINGS_CONFIG, frozen=True)
    _section: ClassVar[str]

    def __init__(self, **options: Any) -> None:
        try:
            super().__init__(**options)
        except ValidationError as err:
            error = self._input_error(err, lambda field: f"{self._section}.{field}")
            error.validation_error = err  # for parse, which names the field another way
            raise error from None

    @classmethod
    def parse(cls, options: dict, name: Callable[[str], str] | None = None) -> Self:
        """Settings from a mapping (keys with dashes or underscores); `name(field)` spells a field in
        an error (default: `SECTION.field`)."""
        try:
            return cls(**{str(key): value for key, value in options.items()})
        except InputError as err:
            if name is None or not hasattr(err, "validation_error"):
                raise
            raise cls._input_error(err.validation_error, name) from None

    @classmethod
    def _input_error(cls, err: ValidationError, name: Callable[[str], str]) -> InputError:
        raise NotImplementedError


def _dashes_to_underscores(data: Any) -> Any:
    """Config keys may be written min-speedup or min_speedup."""
    return {str(k).replace("-", "_"): v for k, v in data.items()} if isinstance(data, dict) else data


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class AnalysisSettings(_SectionSettings):
    """What `analyze` tests and measures: its keyword arguments, the `analysis:` section of an
    audit config and the analysis flags alike. `band` is accepted for `tolerance` (the flag's name)."""

    _section: ClassVar[str] = "analysis"

    alpha: float = Field(0.05, gt=0, lt=1, strict=True, description="the family-wise error rate, e.g. 0.05")
    delta: float = Field(0.05, gt=0, lt=1, strict=True, description="the equivalence margin on total variation, e.g. 0.05")
    dimensions: tuple[str, ...] | None = None
    n_boot: int = Field(1000, ge=1, strict=True)
    seed: int = seed_field(description="the seed of the bootstrap and Monte Carlo nulls")
    tolerance: tuple[float, float] = DEFAULT_BAND
    fallback_threshold: float = Field(0.5, strict=True)
    equivalence: bool = Field(True, strict=True)
    # a deployment to project speed-up onto (stats.advice): draft cost per token and verification
    # cost per step, in plain target steps
    deployment_cost_ratio: float | None = Field(None, gt=0, strict=True, allow_inf_nan=False)
    deployment_verify_cost: float = Field(1.0, gt=0, strict=True, allow_inf_nan=False)
    # the reference group per dimension ({dialect: sae}; the flag's form "dialect=sae"); a dimension
    # not named uses the prompt set's declared reference, else the best-served group (analysis.snapshot)
    reference: dict[str, str] | None = None

    @classmethod
    def _input_error(cls, err: ValidationError, name: Callable[[str], str]) -> InputError:
        spell = lambda field: name("band" if field == "tolerance" else field)  # noqa: E731 - the flag's word for it
        known = ", ".join(sorted({*cls.model_fields, "band"}))
        return input_error(err, cls, spell, lambda names: f"unknown analysis option(s) {', '.join(names)}; known: {known}")

    @model_validator(mode="before")
    @classmethod
    def _band_is_tolerance(cls, data: Any) -> Any:
        data = _dashes_to_underscores(data)
        if isinstance(data, dict) and "band" in data:
            if "tolerance" in data:
                raise InputError("analysis: band and tolerance are one setting; give one of them")
            data = {("tolerance" if k == "band" else k): v for k, v in data.items()}
        return data

    @field_validator("dimensions", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("reference", mode="before")
    @classmethod
    def _dimension_equals_group(cls, value: Any) -> Any:
        """The flag's form "dialect=sae" (one or a list) becomes {dialect: sae}."""
        items = [value] if isinstance(value, str) else value
        if isinstance(items, (list, tuple)):
            out = {}
            for item in items:
                dimension, sep, group = str(item).partition("=")
                if not (sep and dimension.strip() and group.strip()):
                    raise sentence_error(f"must be DIMENSION=GROUP such as dialect=sae; got {item!r}")
                out[dimension.strip()] = group.strip()
            return out
        return value

    @field_validator("tolerance", mode="before")
    @classmethod
    def _band(cls, value: Any) -> tuple[float, float]:
        parts = value
        if isinstance(value, str):  # the flag's form, "0.8,1.25"
            try:
                parts = [float(x) for x in value.split(",")]
            except ValueError:
                parts = None
        if not (
            isinstance(parts, (list, tuple)) and len(parts) == 2 and all(_is_number(x) for x in parts) and 0 < parts[0] <= 1 <= parts[1]
        ):
            example = ",".join(f"{x:g}" for x in DEFAULT_BAND)
            raise sentence_error(f"must be two numbers low,high around 1 (0 < low <= 1 <= high) such as {example}; got {value!r}")
        return float(parts[0]), float(parts[1])

    @field_validator("fallback_threshold")
    @classmethod
    def _acceptance_rate(cls, value: float) -> float:
        if not 0 <= value <= 1:
            raise sentence_error(f"is an acceptance rate, so it lies in [0, 1]; got {value}")
        return value


DISPARITY_METRICS = ("acceptance_rate", "speedup")


class GateThresholds(_SectionSettings):
    """What the gate demands. ``None`` means "what the analysis used" (its α, δ and band).

    - ``alpha``: family-wise level for the equivalence battery and the disparity tests (Holm).
    - ``tv_delta``: the equivalence margin δ on total variation; the TV upper bound must be ≤ δ.
    - ``band_low`` / ``band_high``: tolerance band on a group's ratio to the reference group;
      with only ``band_low`` given, ``band_high`` = 1 / ``band_low`` (Aequitas' τ ≤ r ≤ 1/τ).
    - ``disparity_metrics``: metrics whose ratios are gated (from the snapshot's pairwise tests);
      by default those the analysis compared (acceptance, α where the engine has its own rule, and speed-up).
    - ``min_speedup``: each group's measured speed-up should reach this (1.0: not slowed down).
    - ``min_group_size``: the checked group size: groups with fewer audited prompts warn (their ratio
      interval's coverage is unchecked below 4, contracts.MIN_CHECKED_PROMPTS; power is judged per
      comparison by its status and minimum detectable ratio). Not a prompt set's minimum group size.
    - ``*_severity``: "warn" or "fail" (any case; held as CheckStatus) for a check that is not met.
    - ``fail_on``: which decisions exit 1 (the `decision` check, specaudit.gate.decision):
      "do-not-enable" (default: the report's Do not enable, which every failing check leads to),
      "decision" (also Insufficient evidence) or "fail" (failing checks only).
    """

    _section: ClassVar[str] = "gate"

    alpha: float | None = Field(None, gt=0, lt=1, strict=True, description="the family-wise error rate, e.g. 0.05")
    tv_delta: float | None = Field(None, gt=0, lt=1, strict=True, description="the equivalence margin on total variation, e.g. 0.05")
    band_low: float | None = Field(
        None, gt=0, le=1, strict=True, description="the lowest acceptable ratio of a group to the reference, e.g. 0.8"
    )
    band_high: float | None = Field(
        None, ge=1, strict=True, allow_inf_nan=False, description="the highest acceptable ratio of a group to the reference, e.g. 1.25"
    )
    # None: those each dimension gated (its gated_metrics: an engine's own rule, not the mean β beside it)
    disparity_metrics: tuple[str, ...] | None = None
    disparity_severity: Literal[CheckStatus.WARN, CheckStatus.FAIL] = CheckStatus.FAIL
    tv_severity: Literal[CheckStatus.WARN, CheckStatus.FAIL] = CheckStatus.WARN
    min_speedup: float = Field(1.0, gt=0, strict=True, allow_inf_nan=False, description="the speed-up every group should reach, e.g. 1.0")
    slowdown_severity: Literal[CheckStatus.WARN, CheckStatus.FAIL] = CheckStatus.WARN
    min_group_size: int = Field(MIN_CHECKED_PROMPTS, ge=1, strict=True)
    # the decisions that exit 1 (gate.results.EXIT_ON), so a CI job's exit code agrees with the decision
    fail_on: Literal["fail", "do-not-enable", "decision"] = "do-not-enable"

    @classmethod
    def _input_error(cls, err: ValidationError, name: Callable[[str], str]) -> InputError:
        known = ", ".join(sorted(cls.model_fields))
        return input_error(err, cls, name, lambda names: f"unknown gate setting(s) {', '.join(names)}; known: {known}")

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any) -> Any:
        return _dashes_to_underscores(data)

    @field_validator("disparity_severity", "tv_severity", "slowdown_severity", mode="before")
    @classmethod
    def _severity(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().upper() in (CheckStatus.WARN, CheckStatus.FAIL):
            return CheckStatus(value.strip().upper())
        raise sentence_error(f"must be one of 'warn' or 'fail', got {value!r}")

    @field_validator("disparity_metrics", mode="before")
    @classmethod
    def _metric_names(cls, value: Any) -> tuple[str, ...]:
        metrics = tuple(m.strip() for m in value.split(",") if m.strip()) if isinstance(value, str) else value
        if not isinstance(metrics, (list, tuple)) or not metrics or not all(isinstance(m, str) and m for m in metrics):
            raise sentence_error(f"must be a non-empty list of metric names such as acceptance_rate, speedup; got {value!r}")
        return tuple(metrics)

    def band(self, analysis_band: Any = None) -> tuple[float, float]:
        """The band in force: the gate's own, else the analysis's, else the default band."""
        if self.band_low is not None:
            return self.band_low, self.band_high if self.band_high is not None else 1.0 / self.band_low
        low, high = DEFAULT_BAND
        if isinstance(analysis_band, (list, tuple)) and len(analysis_band) == 2 and all(_is_number(x) for x in analysis_band):
            low, high = float(analysis_band[0]), float(analysis_band[1])
        return low, self.band_high if self.band_high is not None else high

    def to_dict(self) -> dict[str, Any]:
        out = self.model_dump()
        out["disparity_metrics"] = list(self.disparity_metrics) if self.disparity_metrics is not None else None
        return out


def load_config_file(path: str | Path) -> dict:
    """Read a YAML (or JSON) config file into a dict of option names (dashes or underscores)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"config file {path} does not exist")
    try:
        payload = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as err:
        raise InputError(
            f"config file {path} is not UTF-8 text (byte {err.start} is {err.object[err.start]:#04x}); save it as UTF-8"
        ) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark else ""
        raise InputError(f"config file {path}{where} is not valid YAML") from None
    except RecursionError:
        raise InputError(f"config file {path} is nested too deeply to be a config") from None
    if not isinstance(payload, dict):
        raise InputError(f"config file {path} must hold a mapping of option: value")
    odd = next((key for key in payload if not isinstance(key, str)), None)
    if odd is not None:
        raise InputError(
            f"config file {path}: option names are words, but {odd!r} is not a word ({type(odd).__name__}); quote it or fix the key"
        )
    options = {key.replace("-", "_"): value for key, value in payload.items()}
    for option in sorted(ENGINE_OPTIONS.keys() & options.keys()):
        engine, setting = ENGINE_OPTIONS[option]
        where = f"extra: {{{ENGINES[engine].section}: {{{setting}: ...}}}}" if setting else f"extra: {{{ENGINES[engine].section}: ...}}"
        warnings.warn(
            f"config file {path}: `{option}:` is deprecated and is read until the next release; write it as `{where}`",
            FutureWarning,
            stacklevel=2,
        )
    return options


# the option names of flags and config files: the run config's fields, and the engines' settings
# that flags set (--tree, --levels, ...; also an older config's top-level keys)
RUN_OPTIONS = (*RunConfig.model_fields, *ENGINE_OPTIONS)


def run_config_from(options: dict, source: str = "options") -> RunConfig:
    known = set(RUN_OPTIONS)
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(f"{source}: unknown option(s) {', '.join(unknown)}{did_you_mean(unknown[0], known)}")
    return RunConfig(**options)
