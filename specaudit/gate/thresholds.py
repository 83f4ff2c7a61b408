"""Loading the gate's thresholds (`GateThresholds` is a settings model in specaudit.config) and its check statuses."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specaudit.config import RUN_OPTIONS, GateThresholds, load_config_file
from specaudit.contracts import CheckStatus
from specaudit.errors import InputError

PASS, WARN, FAIL = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL
SEVERITIES = (WARN, FAIL)


def load_thresholds(source: str | Path | Mapping[str, Any] | None = None) -> GateThresholds:
    """Thresholds from a YAML config's ``gate:`` section (a path), or from a mapping (either the
    whole config with a ``gate`` key or the gate section itself). ``None`` gives the defaults."""
    if source is None:
        return GateThresholds()
    where = "gate thresholds"
    if isinstance(source, (str, Path)):
        where = f"config file {source}"
        options = load_config_file(source)
        _refuse_unknown_sections(options, where)
        section = options.get("gate", {})
    elif isinstance(source, Mapping):
        section = source["gate"] if "gate" in source else source
    else:
        raise InputError(f"gate thresholds must come from a YAML file or a mapping, got {type(source).__name__}")
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise InputError(f"{where}: the gate section must be a mapping of threshold: value, got {type(section).__name__}")
    try:
        return GateThresholds.parse(dict(section))
    except InputError as err:
        raise InputError(f"{where}: {err}") from None


def _refuse_unknown_sections(options: Mapping[str, Any], where: str) -> None:
    """A gate config is an audit config (run options, `analysis:`, `gate:`): a misspelt `gate:`
    would otherwise leave the default thresholds in force without a word."""
    known = set(RUN_OPTIONS) | {"out", "analysis", "gate"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(
            f"{where}: unknown top-level key(s) {', '.join(unknown)}; the thresholds go under `gate:` "
            "(beside the audit's run options and `analysis:`)"
        )
