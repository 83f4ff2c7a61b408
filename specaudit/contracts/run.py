"""The run's contracts: a plan item (what to decode) and a record (one line of records.jsonl).

records.jsonl holds one JSON object per (prompt, engine, sample). The JSON on disk is the contract
(docs/ARCHITECTURE.md, "Contracts"); `Record` is its typed face at the boundary: `Record.from_json`
checks the type of every field it knows and keeps unknown fields (a backend's own, e.g.
`target_logprobs`) in `extra`, in order, so `to_json` gives back exactly what was read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from specaudit.errors import InputError

if TYPE_CHECKING:
    from specaudit.prompts import Prompt

SCHEMA_VERSION = 1  # of records.jsonl and manifest.json
RECORDS_FILE = "records.jsonl"
MANIFEST_FILE = "manifest.json"
FAULTS_FILE = "faults.jsonl"  # engine faults, one line per failed engine call (Fault, below)
CONTROL_ENGINE = "vanilla"  # the engine every other one is compared with: plain decoding by the target
SPECULATIVE_ENGINE = "speculative"  # the reference speculative engine, and a backend's spec-ON records
SCREEN_ENGINE = "screen"  # specaudit.engines.screen: target samples with the acceptance expected along them

# Prefix caching as an audit axis (`--prefix-cache cold,warm`; docs/request-features.md, "Prefix
# caching"). A served engine's records in such a run say whether the prompt's prefix was meant to
# be in the server's cache (`prefix_cache`: cold, or warm: an earlier request computed the same
# prompt) and how many prompt tokens the server reported reusing (`cached_prompt_tokens`, null
# where the server reports none). They are extras, written only in runs with --prefix-cache.
COLD, WARM = "cold", "warm"
PREFIX_CACHE_STATES = (COLD, WARM)
PREFIX_CACHE_FIELD = "prefix_cache"
CACHED_TOKENS_FIELD = "cached_prompt_tokens"


def record_key(prompt_id: str, engine: str, sample: int | str) -> str:
    return f"{prompt_id}|{engine}|{sample}"


@dataclass(frozen=True)
class PlanItem:
    """One decoding to do: a prompt, by one engine, for one sample label (0, 1, ... for output
    samples; "t0", "t1", ... for timing-only repeats, whose outputs the statistics ignore)."""

    prompt: Prompt
    engine: str
    sample: int | str
    timing_only: bool = False

    @property
    def key(self) -> str:
        return record_key(self.prompt.id, self.engine, self.sample)


# ----------------------------------------------------------------------------- field checks
def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


_INT_LIST = _list_of(_int)
_NUMBER_LISTS = _list_of(_list_of(_number))
# name -> (what the file should hold, its check); in the order records are written.
_CHECKS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "key": ("a string", lambda v: isinstance(v, str)),
    "prompt_id": ("a string", lambda v: isinstance(v, str)),
    "pair_id": ("a string or null", _optional(lambda v: isinstance(v, str))),
    "attributes": ("an object", lambda v: isinstance(v, dict)),
    "engine": ("a string", lambda v: isinstance(v, str)),
    "sample": ("an integer or a string", lambda v: _int(v) or isinstance(v, str)),
    "seed": ("an integer", _int),
    "timing_only": ("true or false", lambda v: isinstance(v, bool)),
    "sampling": ("an object", lambda v: isinstance(v, dict)),
    "k": ("an integer", _int),
    "prompt_token_ids": ("a list of integers", _INT_LIST),
    "output_token_ids": ("a list of integers", _INT_LIST),
    "text": ("a string", lambda v: isinstance(v, str)),
    "finish_reason": ("a string or null", _optional(lambda v: isinstance(v, str))),
    "wall_s": ("a number or null", _optional(_number)),  # null: no engine latency (the screen)
    "ttft_s": ("a number or null", _optional(_number)),
    "steps": ("a number", _number),  # an integer count, or an expectation (the screen)
    # an integer count, an expectation (the screen), or null where the engine does not report it
    # (OpenVINO's requests in flight together)
    "proposed": ("a number or null", _optional(_number)),
    "accepted": ("a number", _number),  # an integer count, or an expectation (the screen)
    "accepted_per_step": ("a list of integers", _INT_LIST),
    "proposed_per_step": ("a list of integers", _INT_LIST),
    "beta": ("a list of lists of numbers", _NUMBER_LISTS),
    "accept_prob": ("a list of lists of numbers", _NUMBER_LISTS),
    "step_pit": ("a list of lists of numbers", _NUMBER_LISTS),
    "draft_s": ("a number or null", _optional(_number)),
    "verify_s": ("a number or null", _optional(_number)),
    "step_s": ("a list of numbers", _list_of(_number)),
    # Calls of a user's verify function that broke its contract (decoding/verify.contract_problem).
    "verify_violations": ("a list of objects", _list_of(lambda v: isinstance(v, dict))),
}
_REQUIRED = ("key",)
# Extras with a meaning of their own, checked where a record has them.
_EXTRA_CHECKS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    PREFIX_CACHE_FIELD: (f"one of {', '.join(PREFIX_CACHE_STATES)}", lambda v: v in PREFIX_CACHE_STATES),
    CACHED_TOKENS_FIELD: ("an integer >= 0 or null", _optional(lambda v: _int(v) and v >= 0)),
}


def cache_fields(state: str, cached_tokens: int | None) -> dict[str, Any]:
    """A record's prefix-cache extras (`Record.with_extra(**cache_fields(...))`), checked."""
    for name, value in ((PREFIX_CACHE_FIELD, state), (CACHED_TOKENS_FIELD, cached_tokens)):
        expected, check = _EXTRA_CHECKS[name]
        if not check(value):
            raise InputError(f"record field {name!r} must be {expected}, got {_shown(value)}")
    return {PREFIX_CACHE_FIELD: state, CACHED_TOKENS_FIELD: cached_tokens}


@dataclass(frozen=True)
class Record:
    """One line of records.jsonl. Fields the line lacked are None and are not written back."""

    key: str
    prompt_id: str | None = None
    pair_id: str | None = None
    attributes: dict | None = None
    engine: str | None = None
    sample: int | str | None = None
    seed: int | None = None
    timing_only: bool | None = None
    sampling: dict | None = None
    k: int | None = None
    prompt_token_ids: list[int] | None = None
    output_token_ids: list[int] | None = None
    text: str | None = None
    finish_reason: str | None = None
    wall_s: float | None = None
    ttft_s: float | None = None
    steps: float | None = None  # int for engines
    proposed: float | None = None  # int for engines
    accepted: float | None = None  # int for engines
    accepted_per_step: list[int] | None = None
    proposed_per_step: list[int] | None = None
    beta: list[list[float]] | None = None
    accept_prob: list[list[float]] | None = None
    step_pit: list[list[float]] | None = None
    draft_s: float | None = None
    verify_s: float | None = None
    step_s: list[float] | None = None
    verify_violations: list[dict] | None = None
    extra: dict = field(default_factory=dict)  # fields of a backend or a later version, in order
    present: frozenset = field(default=frozenset(), compare=False, repr=False)  # known fields the JSON had

    @classmethod
    def from_json(cls, payload: Any, where: str = "record") -> Record:
        """Check one parsed line; `where` names it ("records.jsonl, line 7") in the InputError
        that a missing key or a field of the wrong type raises."""
        if not isinstance(payload, dict):
            raise InputError(f"{where}: not a record (a JSON object), got {type(payload).__name__}")
        for name in _REQUIRED:
            if name not in payload:
                raise InputError(f"{where}: the record has no {name!r} field")
        known, extra = {}, {}
        for name, value in payload.items():
            if name in _CHECKS:
                expected, check = _CHECKS[name]
                if not check(value):
                    raise InputError(f"{where}: field {name!r} must be {expected}, got {_shown(value)}")
                known[name] = value
            else:
                if name in _EXTRA_CHECKS and not _EXTRA_CHECKS[name][1](value):
                    raise InputError(f"{where}: field {name!r} must be {_EXTRA_CHECKS[name][0]}, got {_shown(value)}")
                extra[name] = value
        return cls(**known, extra=extra, present=frozenset(known))

    def to_json(self) -> dict:
        """The record as written to records.jsonl: known fields in their fixed order, then the extras."""
        present = self.present or frozenset(_CHECKS)
        payload = {name: getattr(self, name) for name in _CHECKS if name in present}
        payload.update(self.extra)
        return payload

    def replace(self, **changes: Any) -> Record:
        """This record with known fields changed (they count as present when written)."""
        return replace(self, **changes, present=(self.present or frozenset(_CHECKS)) | frozenset(changes))

    def with_extra(self, **values: Any) -> Record:
        """This record with backend fields added after the known ones (e.g. backend="endpoint")."""
        return replace(self, extra={**self.extra, **values})


# ----------------------------------------------------------------------------- engine faults
# name -> (what the file should hold, its check); in the order faults are written.
_FAULT_CHECKS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "key": ("a string", lambda v: isinstance(v, str)),
    "prompt_id": ("a string", lambda v: isinstance(v, str)),
    "engine": ("a string", lambda v: isinstance(v, str)),
    "sample": ("an integer or a string", lambda v: _int(v) or isinstance(v, str)),
    "seed": ("an integer or null", _optional(_int)),
    "timing_only": ("true or false", lambda v: isinstance(v, bool)),
    "error": ("a string", lambda v: isinstance(v, str)),
    "message": ("a string", lambda v: isinstance(v, str)),
    "records_before": ("an integer", _int),
    "invocation": ("an integer", _int),
    "at": ("a string", lambda v: isinstance(v, str)),
}


@dataclass(frozen=True)
class Fault:
    """One line of faults.jsonl: an engine call that failed (raised, or a server's HTTP 5xx) for
    one plan item, with the engine's own message. It is a finding, not a record: records.jsonl
    holds only what engines answered, so every statistic reads it unchanged, and the item stays
    unrecorded (a resumed run asks the engine again; faults.jsonl keeps every failure).

    `error` is the exception's type (or "HTTP 503"), `message` the engine's words; `records_before`
    counts the lines records.jsonl held when it failed (where the fault falls among the records:
    analysis asks whether the engine still speculated after it); `invocation` is the manifest's
    invocation count of the run that met it; `at` its UTC time.
    """

    key: str
    prompt_id: str
    engine: str
    sample: int | str
    seed: int | None
    timing_only: bool
    error: str
    message: str
    records_before: int
    invocation: int
    at: str

    @classmethod
    def from_json(cls, payload: Any, where: str = "fault") -> Fault:
        if not isinstance(payload, dict):
            raise InputError(f"{where}: not a fault (a JSON object), got {type(payload).__name__}")
        for name, (expected, check) in _FAULT_CHECKS.items():
            if name not in payload:
                raise InputError(f"{where}: the fault has no {name!r} field")
            if not check(payload[name]):
                raise InputError(f"{where}: field {name!r} must be {expected}, got {_shown(payload[name])}")
        return cls(**{name: payload[name] for name in _FAULT_CHECKS})

    def to_json(self) -> dict:
        return {name: getattr(self, name) for name in _FAULT_CHECKS}


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"
