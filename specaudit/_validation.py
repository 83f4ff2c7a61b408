"""Pydantic validation errors as the one-sentence InputError every command gives for bad input.

Settings models (specaudit.config: RunConfig, AnalysisSettings, GateThresholds;
specaudit.engines.endpoint.settings.EndpointSettings) are pydantic models; this module turns their first
error into "NAME must be WHAT, got VALUE" with the name as the user wrote it (a CLI flag or a config
key), and unknown keys into one list. A field's `description` is added in brackets as the hint; a
validator with its own sentence raises `sentence_error`, which follows the name as written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ValidationError
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
}


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
        return f" in {low[0]}{low[2]:g}, {high[2]:g}{high[0]}"
    side = low or high
    return f" {side[1]} {side[2]:g}" if side else ""


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
        return InputError(f"{name(field)} must be {base}{_bounds(model, field)}, got {value!r}{_hint(model, field)}")
    if kind == "literal_error":
        return InputError(f"{name(field)} must be one of {first['ctx']['expected']}, got {value!r}")
    if kind == "missing":
        return InputError(f"{name(field)} is missing")
    expected = _EXPECTED.get(kind, first["msg"].removeprefix("Value error, ").lower())
    return InputError(f"{name(field)} must be {expected}, got {value!r}{_hint(model, field)}")
