"""What every section of the report view shares: chart ids, the guard that turns a broken snapshot
part into a note, table limits and the generic diagnostic table."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from specaudit.report.view.format import (
    MISSING,
    badge,
    num,
    pvalue,
)

NOT_RUN = "not run"
FOREST_METRICS = ("acceptance_rate", "mean_beta", "speedup")  # those a run compared (mean β where the engine has its own rule)
MAX_ROWS = 200  # long tables (offenders, divergences) are cut here, with the count said


class Ids:
    """Chart ids unique within one report and identical between renders of the same snapshot."""

    def __init__(self) -> None:
        self._count = itertools.count(1)

    def __call__(self, kind: str) -> str:
        return f"{kind}{next(self._count)}"


def guard(name: str, build: Callable[..., dict], *args: Any) -> dict:
    try:
        return build(*args)
    except Exception as err:  # a report shows what it can; the failing part says why
        return {
            "ran": False,
            "status": "error",
            "badge": badge("error"),
            "broken": True,
            "reason": f"the {name} section of the snapshot could not be rendered ({type(err).__name__}: {err})",
        }


def generic_rows(rows: Any) -> dict[str, Any]:
    """A table of whatever columns a diagnostic has (they vary by test), numbers formatted."""
    rows = [r for r in (rows or []) if isinstance(r, Mapping)][:MAX_ROWS]
    columns = list(dict.fromkeys(k for r in rows for k in r if k != "flagged"))
    body = [[_cell(r.get(c)) for c in columns] for r in rows]
    return {"columns": columns, "rows": body}


def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return MISSING if value is None else ("yes" if value else "no")
    if isinstance(value, float):
        return pvalue(value) if 0 <= value <= 1 and value < 0.001 else num(value)
    if isinstance(value, (list, dict)):
        return ", ".join(map(str, value)) if isinstance(value, list) else ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)
