"""Names a package exports but imports on first use (PEP 562), so that importing the package for
a light name (a constant, a settings class) does not pay for torch and transformers."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_exports(namespace: dict[str, Any], table: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for the package whose globals are `namespace`: a name in `table`
    (name -> module holding it) is imported on first access and cached in the package."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name in table:
            value = getattr(import_module(table[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return list(namespace["__all__"])

    return __getattr__, __dir__
