"""The snapshot contract: what snapshot.json holds, checked once on read by every consumer.

`specaudit analyze` writes snapshot.json; `gate`, `report` and `monitor` read it, each through
`load_snapshot`. A file that is not a snapshot of this schema version is refused with one
sentence (InputError, exit 2) instead of being judged: a gate must never go green on garbage.

The typed view (`Snapshot`) pins the sections consumers read and the types they rely on; inside
them, keys it does not name are kept as they are, so a newer analysis may add fields freely.
Statuses are the contracts' enums (specaudit.contracts.status), spelt one way on disk; a snapshot
written before (lower-case "pass", an equivalence status "error") is read through their `parse`,
and `load_snapshot` hands every consumer the one spelling.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from specaudit.contracts.status import CheckStatus, EquivalenceStatus
from specaudit.errors import InputError

SNAPSHOT_SCHEMA_VERSION = 1
SNAPSHOT_FILE = "snapshot.json"

_REGENERATE = "regenerate it with `specaudit analyze RUN_DIR`"


class _Section(BaseModel):
    # strict: a JSON string is not a number, true is not 1; extra: keys this view does not name pass through
    model_config = ConfigDict(strict=True, extra="allow")


class MetricEstimate(_Section):
    """One metric of one group: the estimate and its confidence interval (null where undefined)."""

    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None


class GroupEntry(_Section):
    n_prompts: int | None = None
    metrics: dict[str, MetricEstimate]


class DimensionGroups(_Section):
    """`groups.<dimension>`: the all-prompts block and one block per group."""

    reference: str | None = None
    overall: GroupEntry | None = None
    by_group: dict[str, GroupEntry] = {}


class RunSection(_Section):
    id: str | None = None
    engines: list[str] = []
    dimensions: list[str] = []
    config: dict[str, Any] | None = None
    analysis: dict[str, Any] | None = None
    models: dict[str, Any] | None = None
    versions: dict[str, Any] | None = None
    device: dict[str, Any] | None = None
    prompt_set: dict[str, Any] | None = None
    seeds: dict[str, Any] | None = None


SKIPPED = "skipped"  # a test with no data to test: not a check outcome, so no CheckStatus


def parse_verdict(value: Any) -> CheckStatus | Literal["skipped", EquivalenceStatus.NOT_RUN]:
    """A test's or an engine's verdict: a CheckStatus in any case, "skipped" (no data), or NOT_RUN
    (a test that could not reject, e.g. two-sample tests with one sample per prompt)."""
    text = str(value).strip().lower()
    if text == SKIPPED:
        return SKIPPED
    return EquivalenceStatus.NOT_RUN if text == EquivalenceStatus.NOT_RUN else CheckStatus.parse(value)


def parse_battery_status(value: Any) -> CheckStatus | Literal[EquivalenceStatus.NOT_RUN]:
    """The equivalence section's status: PASS or FAIL when the battery ran, NOT_RUN when nothing was
    audited. Snapshots before the contracts wrote "error" for a failed control: that is FAIL."""
    text = str(value).strip().lower()
    if text == "error":
        return CheckStatus.FAIL
    if text == EquivalenceStatus.NOT_RUN.value:
        return EquivalenceStatus.NOT_RUN
    return CheckStatus.parse(value)


def spelt(value: Any, parse: Callable[[Any], str] = parse_battery_status) -> str:
    """A status kept as text (a monitor history row, a summary), spelt as the contracts spell it;
    a word no status type knows ("unknown", "skipped") stays as it is."""
    try:
        return str(parse(value))
    except ValueError:
        return str(value)


def control_failed(section: Mapping[str, Any]) -> bool:
    """Whether an equivalence section says its control failed (the audit is void): its flag, or
    the status "error" that snapshots before the contracts wrote for it."""
    return bool(section.get("control_failed")) or str(section.get("status")).strip().lower() == "error"


def _parsed(parse):
    return BeforeValidator(lambda value: value if value is None else parse(value))


Verdict = Annotated[CheckStatus | Literal["skipped", EquivalenceStatus.NOT_RUN], _parsed(parse_verdict)]
Check = Annotated[CheckStatus, _parsed(CheckStatus.parse)]


class ResultVerdict(_Section):
    """A test's result in the snapshot (goodness of fit, two-sample, greedy): its verdict, if any."""

    verdict: Verdict | None = None


class EngineEquivalence(_Section):
    """One engine's entry: its verdict (a CheckStatus; WARN only for a control rejected at alpha
    alone) and its EquivalenceStatus, which agree (a WARN control is NO_VIOLATION_FOUND)."""

    verdict: Verdict | None = None
    status: Annotated[EquivalenceStatus, _parsed(EquivalenceStatus.parse)] | None = None
    goodness_of_fit: ResultVerdict | None = None
    two_sample: ResultVerdict | None = None
    greedy: ResultVerdict | None = None


class EquivalenceSection(_Section):
    """`equivalence`: the battery's overall status and one entry per engine (verdict and tests)."""

    status: Annotated[CheckStatus | Literal[EquivalenceStatus.NOT_RUN], _parsed(parse_battery_status)]
    control_failed: bool = False  # the control failed its own test: status is FAIL and the audit is void
    engines: dict[str, EngineEquivalence] = {}
    control: str | None = None  # the engine judged as the control (plain decoding)
    mode: str | None = None  # "sampling" or "greedy"
    alpha: float | None = None
    delta: float | None = None


class DimensionDisparities(_Section):
    metrics: dict[str, dict[str, Any]] = {}
    flags: list[Any] = []


class GateCheckEntry(_Section):
    name: str | None = None
    status: Check


class GateSection(_Section):
    """`gate`: the gate's status and its checks, as `specaudit gate` wrote them."""

    status: Check
    counts: dict[Check, int] | None = None
    checks: list[GateCheckEntry] = []


class SpeedSection(_Section):
    """`speed`: where the speed-up columns come from when the screen measured acceptance: "cost
    model" (predicted per screened prompt, with the model and its out-of-sample validation) or
    "none" (too few timed prompts; `reason` says why)."""

    source: str
    reason: str | None = None
    cost_model: dict[str, Any] | None = None
    validation: dict[str, Any] | None = None
    # dimension -> group -> n_timed_prompts, measured_over_predicted, others, pvalue, pvalue_holm
    validation_by_group: dict[str, dict[str, dict[str, Any]]] | None = None
    validation_by_group_tested: int | None = None  # groups tested
    validation_by_group_smallest_pvalue_holm: float | None = None
    validation_by_group_method: str | None = None
    finding: str | None = None
    single_prompt_outliers: str | None = None  # groups off their prediction on one timed prompt: re-time, not a finding


class ScreenSection(_Section):
    """`screen`: does the screen reproduce the speculative engine on the prompts both ran
    (analysis.screen_agreement)? Two tests, Holm over them: `engine_over_screen_acceptance` on the
    same prompts and `given_engine_paths` (the acceptance model along the engine's own paths), each
    {value, ci_low, ci_high, pvalue, pvalue_holm, rejected}, or `note` where a test could not run."""

    n_prompts: int
    method: str | None = None
    engine_over_screen_acceptance: dict[str, Any] | None = None
    given_engine_paths: dict[str, Any] | None = None
    agrees: bool | None = None
    finding: str | None = None
    note: str | None = None


class Snapshot(_Section):
    """The typed view of snapshot.json (schema version SNAPSHOT_SCHEMA_VERSION)."""

    schema_version: int
    run: RunSection
    equivalence: EquivalenceSection
    groups: dict[str, DimensionGroups]
    disparities: dict[str, DimensionDisparities] = {}
    recommendations: dict[str, Any] = {}
    prompts: list[dict[str, Any]] = []
    gate: GateSection | None = None
    speed: SpeedSection | None = None  # only for runs with the screen (stats.cost_model)
    screen: ScreenSection | None = None  # only for runs with the screen and the speculative engine
    mitigation: dict[str, Any] | None = None  # `specaudit mitigate`'s before/after (its before_after.json), on a re-audit


def snapshot_path(path: str | Path) -> Path:
    """A run folder or a snapshot file → the snapshot file's path."""
    path = Path(path)
    return path / SNAPSHOT_FILE if path.is_dir() else path


def _read(path: str | Path) -> tuple[Any, str]:
    file = snapshot_path(path)
    if not file.is_file():
        hint = " (run `specaudit analyze RUN_DIR` first)" if Path(path).is_dir() else ""
        raise InputError(f"{file} does not exist{hint}")
    try:
        return json.loads(file.read_text(encoding="utf-8")), str(file)
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(f"{file} is not valid JSON ({err}); {_REGENERATE}") from None
    except OSError as err:
        raise InputError(f"cannot read {file}: {err.strerror}") from None


_EXPECTED = {
    "dict_type": "an object",
    "list_type": "a list",
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number or null",
    "bool_type": "true or false",
    "model_type": "an object",
}


def _first_problem(err: ValidationError) -> str:
    """One clause naming the first field that breaks the contract, e.g. "groups must be an object, got a list"."""
    problem = err.errors(include_url=False)[0]
    field = ".".join(str(part) for part in problem["loc"]) or "the top level"
    if problem["type"] == "missing":
        return f"has no '{field}' section" if len(problem["loc"]) == 1 else f"has no '{field}'"
    got = type(problem.get("input")).__name__
    got = {"dict": "an object", "list": "a list", "str": "a string", "NoneType": "null", "bool": "a boolean"}.get(got, got)
    want = _EXPECTED.get(problem["type"].removesuffix("_parsing"), None)
    return f"{field} must be {want}, got {got}" if want else f"{field}: {problem['msg'].removeprefix('Value error, ')}"


def validate_snapshot(snapshot: Any, where: str = "snapshot") -> Snapshot:
    """The typed view of a snapshot mapping; InputError (one sentence naming ``where``) if it breaks the contract."""
    if not isinstance(snapshot, Mapping):
        raise InputError(f"{where} is not a specaudit snapshot (a JSON object), it holds {type(snapshot).__name__}; {_REGENERATE}")
    if "schema_version" not in snapshot:
        raise InputError(f"{where} is not a specaudit snapshot (no schema_version field); {_REGENERATE}")
    version = snapshot["schema_version"]
    if version != SNAPSHOT_SCHEMA_VERSION or isinstance(version, bool):
        raise InputError(
            f"{where} has schema_version {version!r} but this specaudit reads version {SNAPSHOT_SCHEMA_VERSION}; "
            "re-run `specaudit analyze` with this version or upgrade specaudit"
        )
    try:
        return Snapshot.model_validate(dict(snapshot))
    except ValidationError as err:
        problem = _first_problem(err)
        raise InputError(
            f"{where}{' ' if problem.startswith('has no') else ': '}{problem}; the file is damaged or not a snapshot ({_REGENERATE})"
        ) from None


def _one_spelling(snapshot: dict[str, Any], typed: Snapshot) -> dict[str, Any]:
    """The snapshot with every typed status as its enum member, whatever case the file used; the
    sections changed are copies, so the caller's mapping is left as it was."""
    old, section = snapshot["equivalence"], typed.equivalence
    engines = {}
    for name, raw in (old.get("engines") or {}).items():
        entry, typed_entry = dict(raw), section.engines[name]
        for key in ("verdict", "status"):
            if getattr(typed_entry, key) is not None:
                entry[key] = getattr(typed_entry, key)
        for test in ("goodness_of_fit", "two_sample", "greedy"):
            result = getattr(typed_entry, test)
            if result is not None and result.verdict is not None:
                entry[test] = {**raw[test], "verdict": result.verdict}
        engines[name] = entry
    respelt = {**snapshot, "equivalence": {**old, "status": section.status, "engines": engines}}
    if control_failed(old):
        respelt["equivalence"]["control_failed"] = True
    if typed.gate is not None:
        gate = snapshot["gate"]
        respelt["gate"] = {
            **gate,
            "status": typed.gate.status,
            "checks": [{**raw, "status": check.status} for raw, check in zip(gate.get("checks") or [], typed.gate.checks)],
        }
        if typed.gate.counts is not None:
            respelt["gate"]["counts"] = typed.gate.counts
    return respelt


def load_snapshot(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """The validated snapshot (as the dict read from JSON, its statuses as the contracts' enums)
    from a snapshot.json path, a run folder holding one, or a mapping. Every command that reads a
    snapshot reads it here."""
    if isinstance(source, Mapping):
        snapshot, where = dict(source), "snapshot"
    elif isinstance(source, (str, Path)):
        snapshot, where = _read(source)
    else:
        raise InputError(f"a snapshot is a snapshot.json path, its run folder or a mapping, not {type(source).__name__}")
    return _one_spelling(snapshot, validate_snapshot(snapshot, where))


__all__ = [
    "SNAPSHOT_FILE",
    "SNAPSHOT_SCHEMA_VERSION",
    "Snapshot",
    "control_failed",
    "load_snapshot",
    "parse_battery_status",
    "parse_verdict",
    "snapshot_path",
    "spelt",
    "validate_snapshot",
]
