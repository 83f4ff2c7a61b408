"""Pydantic validation errors as the one-sentence InputError every command gives for bad input.

Settings models (specaudit.config: RunConfig, AnalysisSettings, GateThresholds;
specaudit.engines.endpoint.settings.EndpointSettings) are pydantic models; this module turns their first
error into "NAME must be WHAT, got VALUE" with the name as the user wrote it (a CLI flag or a config
key), and unknown keys into one list. A field's `description` is added in brackets as the hint; a
validator with its own sentence raises `sentence_error`, which follows the name as written.

Numbers are checked here once for every model and flag: SETTINGS_CONFIG (every settings model's
config) refuses NaN and ±inf, `seed_field` bounds a seed to 0 .. 2**63 - 1, and the argparse types
`finite_float` and `seed_int` do the same for flags before any command starts.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from specaudit.errors import InputError

_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "a mapping of key: value",
    "tuple_type": "a list",
    "list_type": "a list",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "finite_number": "a finite number",
}


def expected(kind: str, message: str) -> str:
    """What a pydantic error of type `kind` wanted, in words ("an integer"); its own message otherwise."""
    return _EXPECTED.get(kind) or (message[:1].lower() + message[1:]).removeprefix("value error, ")


_RANGE_ERRORS = ("greater_than_equal", "greater_than", "less_than_equal", "less_than", "finite_number")
SENTENCE = "sentence"


def sentence_error(text: str) -> PydanticCustomError:
    """An error whose message follows the field's name as written: "NAME " + text."""
    return PydanticCustomError(SENTENCE, "{text}", {"text": text})  # the text as context: braces in it stay as written


def _bounds(model: type[BaseModel], field: str) -> str:
    """ " >= 1", " > 0", or " in (0, 1]" for a field with bounds on both sides; "" without any."""
    info = model.model_fields.get(field)
    low = high = None
    for constraint in info.metadata if info else ():
        if isinstance(constraint, Ge):
            low = ("[", ">=", constraint.ge)
        elif isinstance(constraint, Gt):
            low = ("(", ">", constraint.gt)
        elif isinstance(constraint, Le):
            high = ("]", "<=", constraint.le)
        elif isinstance(constraint, Lt):
            high = (")", "<", constraint.lt)
    if low and high:
        return f" in {low[0]}{_number(low[2])}, {_number(high[2])}{high[0]}"
    side = low or high
    return f" {side[1]} {_number(side[2])}" if side else ""


def _number(bound: Any) -> str:
    return "2**63 - 1" if bound == SEED_MAX else f"{bound:g}"


def _hint(model: type[BaseModel], field: str) -> str:
    info = model.model_fields.get(field)
    return f" ({info.description})" if info and info.description else ""


def input_error(
    err: ValidationError, model: type[BaseModel], name: Callable[[str], str], unknown: Callable[[list[str]], str]
) -> InputError:
    """The InputError for `err` raised by `model`: `name(field)` spells a field for the user,
    `unknown(fields)` is the sentence for keys the model does not know."""
    errors = err.errors(include_url=False)
    extras = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden" and e["loc"]]
    if extras:
        return InputError(unknown(sorted(extras)))
    first = errors[0]
    field = str(first["loc"][0]) if first["loc"] else ""
    value: Any = first.get("input")
    kind = first["type"]
    if kind == SENTENCE:
        return InputError(f"{name(field)} {first['msg']}")
    if kind in _RANGE_ERRORS or (kind in _EXPECTED and _bounds(model, field)):
        base = "an integer" if "int" in str(model.model_fields[field].annotation) else "a number"
        base = "a finite number" if kind == "finite_number" else base
        return InputError(f"{name(field)} must be {base}{_bounds(model, field)}, got {value!r}{_hint(model, field)}")
    if kind == "literal_error":
        return InputError(f"{name(field)} must be one of {first['ctx']['expected']}, got {value!r}")
    if kind == "missing":
        return InputError(f"{name(field)} is missing")
    expected = _EXPECTED.get(kind, first["msg"].removeprefix("Value error, ").lower())
    return InputError(f"{name(field)} must be {expected}, got {value!r}{_hint(model, field)}")


Settings = TypeVar("Settings", bound=BaseModel)


def settings_section(section: Any, model: type[Settings], label: str, *, levels: str | None = None) -> Settings:
    """A config section (a mapping such as `extra.openvino`) validated into `model`, every error one
    sentence naming `label`.field. Keys may be spelled with dashes; the field `levels`, where named,
    may be given as "1,4" (a flag's value or a YAML scalar)."""
    known = ", ".join(model.model_fields)
    if not isinstance(section, dict):
        raise InputError(f"{label} must be a mapping of setting: value ({known}), got {type(section).__name__}")
    section = {str(key).replace("-", "_"): value for key, value in section.items()}
    if levels and isinstance(section.get(levels), str):
        try:
            section[levels] = tuple(int(part) for part in section[levels].split(",") if part.strip())
        except ValueError:
            raise InputError(f"{label}.{levels} must be integers such as 1,4, got {section[levels]!r}") from None
    try:
        return model(**section)
    except ValidationError as err:
        raise input_error(
            err,
            model,
            lambda field: typed_as(f"{label}.{field}"),
            lambda names: f"{label}: unknown setting(s) {', '.join(names)}; known: {known}",
        ) from None


# ----------------------------------------------------------------------------- numbers, checked once
# Every settings model shares this config: NaN and ±inf are refused ("finite_number") wherever a
# float is read, so a flag or config value of nan cannot turn a comparison off silently. A field
# where infinity means something says so itself (Field(allow_inf_nan=True) and a description).
SETTINGS_CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False)

# Seeds reach torch.Generator.manual_seed, numpy and the servers' int64 `seed` field: 0 .. 2**63 - 1.
SEED_MAX = (1 << 63) - 1


def seed_field(default: int = 0, description: str = "a seed, 0 to 2**63 - 1") -> Any:
    """A seed setting of any settings model, bounded to what every engine accepts."""
    return Field(default, ge=0, le=SEED_MAX, strict=True, description=description)


def finite_float(text: str) -> float:
    """The argparse type of every float flag: a finite number (argparse names the flag and exits 2)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def seed_int(text: str) -> int:
    """The argparse type of every seed flag: an integer 0 .. 2**63 - 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 2**63 - 1 (what torch, numpy and servers accept), got {text}")
    return value


def positive_int(text: str) -> int:
    """The argparse type of a count flag that must be at least 1 (`--last N`)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


# ----------------------------------------------------------------------------- the user's words
def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """ "; did you mean X?" for the choice closest to a mistyped `word`, "" where none is close: the
    one place a typo gets a suggestion (flags, their choices, sampling settings, config keys)."""
    import difflib

    words = {choice.lstrip("-"): choice for choice in choices}  # a flag's dashes are syntax: `--bogus` is not near `--out`
    close = difflib.get_close_matches(word.lstrip("-"), list(words), n=1, cutoff=0.6)
    return f"; did you mean {words[close[0]]}?" if close else ""


# How the user wrote each setting they gave as a flag, by its config key ("endpoint.api_key_env" ->
# "--api-key-env"): the command line registers them once (cli.servers.with_server_flags), and a
# message about a setting, however deep (a server that does not answer, an unset key variable),
# names it through `typed_as`. A setting not given as a flag is named by its config key.
_TYPED: dict[str, str] = {}


def register_typed(spellings: Mapping[str, str]) -> None:
    """The flags of this command, replacing those of any earlier command in the process."""
    _TYPED.clear()
    _TYPED.update(spellings)


def typed_as(setting: str) -> str:
    """`setting` (a config key such as `k` or `endpoint.speculative_url`) as the user wrote it."""
    return _TYPED.get(setting, setting)


def finite(value: object) -> bool:
    """A real, finite number: not a bool, not NaN, not infinite (what a measured figure must be)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
