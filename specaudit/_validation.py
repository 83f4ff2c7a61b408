"""Pydantic validation errors as the one-sentence InputError every command gives for bad input.

Settings models (specaudit.config.RunConfig, specaudit.backends.endpoint.EndpointSettings) are
pydantic models; this module turns their first error into "NAME must be WHAT, got VALUE" with the
name as the user wrote it (a CLI flag or a config key), and unknown keys into one list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from annotated_types import Ge, Gt
from pydantic import BaseModel, ValidationError

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


def _bounds(model: type[BaseModel], field: str) -> str:
    info = model.model_fields.get(field)
    for constraint in info.metadata if info else ():
        if isinstance(constraint, Ge):
            return f" >= {constraint.ge}"
        if isinstance(constraint, Gt):
            return f" > {constraint.gt}"
    return ""


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
    if kind in ("greater_than_equal", "greater_than") or (kind in _EXPECTED and _bounds(model, field)):
        base = "an integer" if "int" in str(model.model_fields[field].annotation) else "a number"
        return InputError(f"{name(field)} must be {base}{_bounds(model, field)}, got {value!r}")
    if kind == "literal_error":
        return InputError(f"{name(field)} must be one of {first['ctx']['expected']}, got {value!r}")
    if kind == "missing":
        return InputError(f"{name(field)} is missing")
    expected = _EXPECTED.get(kind, first["msg"].removeprefix("Value error, ").lower())
    return InputError(f"{name(field)} must be {expected}, got {value!r}")
