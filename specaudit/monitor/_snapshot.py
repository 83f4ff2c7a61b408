"""Reading snapshot.json for monitoring: validation, per-group metric points, fingerprints.

Monitoring reads snapshots only (docs/ARCHITECTURE.md, Contracts): never records, never models. Everything
the history store keeps is derived here, so the store and the drift checks agree on what a
snapshot means.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from functools import cached_property, lru_cache
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from specaudit.contracts.snapshot import ModelInfo, ModelsBlock, PromptSetInfo, parse_verdict, plain_data, read_snapshot, spelt

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import Snapshot

# The row label of each dimension's "all prompts" metrics (the snapshot's `overall` block).
OVERALL = "_overall"
# Bootstrap CIs in snapshots are 95 % unless the analysis section says otherwise.
DEFAULT_CI_LEVEL = 0.95


@lru_cache(maxsize=8)
def _normal_quantile(level: float) -> float:
    return NormalDist().inv_cdf(0.5 + level / 2)


@dataclass(frozen=True)
class MetricPoint:
    """One metric of one group in one snapshot: the estimate and its confidence interval."""

    dimension: str
    group: str
    metric: str
    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    n_prompts: int | None = None
    n_tokens: int | None = None
    ci_level: float = DEFAULT_CI_LEVEL

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.dimension, self.group, self.metric)

    @cached_property
    def standard_error(self) -> float:
        """Normal-approximation standard error from the CI width, (high − low) / (2 z); NaN without a CI.

        Bootstrap percentile CIs can be asymmetric; the half-width average is the approximation
        the drift test states.
        """
        if self.ci_low is None or self.ci_high is None:
            return math.nan
        return max(float(self.ci_high) - float(self.ci_low), 0.0) / (2 * _normal_quantile(self.ci_level))


@dataclass(frozen=True)
class RunIdentity:
    """What the history store keeps about every run: its name and time, the equivalence status, and
    the fingerprints of what was audited (models, prompt set, settings, library versions)."""

    name: str
    created: str
    equivalence_status: str
    target: str
    target_hash: str
    draft: str
    draft_hash: str
    prompt_set: str
    prompt_set_version: str
    prompt_set_checksum: str
    config_hash: str
    versions_hash: str
    ci_level: float

    def identity(self) -> dict[str, Any]:
        """The identity's fields alone (a store row's columns)."""
        return {f.name: getattr(self, f.name) for f in fields(RunIdentity)}


@dataclass(frozen=True)
class SnapshotSummary(RunIdentity):
    """A snapshot's identity as the store keeps it, with its verdicts and metric points."""

    engine_verdicts: dict[str, str] = field(default_factory=dict)
    points: tuple[MetricPoint, ...] = field(default=(), repr=False)


def ci_level(snapshot: Snapshot) -> float:
    analysis = snapshot.run.analysis
    level = getattr(analysis, "ci", getattr(analysis, "confidence_level", DEFAULT_CI_LEVEL))  # extras, where written
    return float(level) if isinstance(level, (int, float)) and 0 < level < 1 else DEFAULT_CI_LEVEL


def _number(v: Any) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _count(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def metric_points(snapshot: Snapshot | Mapping[str, Any]) -> list[MetricPoint]:
    """Every (dimension, group, metric) of a snapshot (a mapping is validated first), the overall block as group OVERALL."""
    snapshot = read_snapshot(snapshot)
    level = ci_level(snapshot)
    points = []
    for dimension, block in snapshot.groups.items():
        entries = [(OVERALL, block.overall)] if block.overall is not None else []
        entries += list(block.by_group.items())
        for group, entry in entries:
            for metric, estimate in entry.metrics.items():
                points.append(
                    MetricPoint(
                        str(dimension),
                        str(group),
                        str(metric),
                        _number(estimate.value),
                        _number(estimate.ci_low),
                        _number(estimate.ci_high),
                        _count(getattr(estimate, "n_prompts", None)),  # counts ride along as extras
                        _count(getattr(estimate, "n_tokens", None)),
                        level,
                    )
                )
    return points


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def snapshot_digest(snapshot: Mapping[str, Any]) -> str:
    """Content hash of a whole snapshot but the analysis's own duration: the same records analysed the
    same way are the same snapshot, however long the analysis took."""
    content = dict(snapshot)
    with contextlib.suppress(KeyError, TypeError, AttributeError):  # a snapshot without an analysis duration
        run = snapshot["run"]
        content["run"] = {**run, "analysis": {k: v for k, v in run["analysis"].items() if k != "seconds"}}
    return hashlib.sha256(canonical_json(content).encode("utf-8")).hexdigest()


def fingerprint(value: Any) -> str:
    """Short content hash: equal fingerprints mean the same model / prompt set / config."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()[:16]


def _utc_iso(text: Any) -> str | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:  # naive times are taken as UTC, the runner's convention
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def config_context(snapshot: Snapshot) -> dict[str, Any]:
    """The settings that change what a run measures, apart from models and prompt set (their own fingerprints).

    Paths to models and prompts are left out: the same weights moved to another folder are the
    same audit subject, and their content hashes are compared separately; so is the decoding seed.
    """
    run = snapshot.run
    # The decoding seed is not a setting: `monitor run` draws a new one for every run.
    settings = run.config.as_written() if run.config is not None else {}
    config = {k: v for k, v in settings.items() if k not in ("target", "draft", "prompts", "seed")}
    written = run.analysis.model_dump(exclude_unset=True) if run.analysis is not None else {}
    analysis = {k: v for k, v in written.items() if k != "seconds"}
    return {"config": config, "analysis": analysis}


def _model_context(entry: ModelInfo | None) -> tuple[str, str]:
    if entry is None:
        return "", ""
    # The name is a label; the content (hashes, revision, class, size) is the identity.
    written = entry.model_dump(exclude_unset=True)
    identity = {k: v for k, v in written.items() if k != "name"}
    return str(entry.written("name", "")), fingerprint(identity or written)


def library_versions(snapshot: Snapshot) -> dict[str, Any]:
    """The run's `versions` as written: specaudit's and every library's (a change is named beside a drift)."""
    return snapshot.run.versions.model_dump(exclude_unset=True) if snapshot.run.versions is not None else {}


def summarize(snapshot: Snapshot) -> SnapshotSummary:
    """Fingerprints, tags and metric points of a validated snapshot."""
    run = snapshot.run
    models = run.models or ModelsBlock()
    target, target_hash = _model_context(models.target)
    draft, draft_hash = _model_context(models.draft)
    prompt_set = run.prompt_set or PromptSetInfo()
    equivalence = snapshot.equivalence
    verdicts = {
        str(engine): spelt(entry.verdict if "verdict" in entry.model_fields_set else "unknown", parse_verdict)
        for engine, entry in equivalence.engines.items()
    }
    return SnapshotSummary(
        name=str(run.id or "run"),
        created=_utc_iso(run.created) or utc_now(),
        equivalence_status=spelt(equivalence.status),
        engine_verdicts=verdicts,
        target=target,
        target_hash=target_hash,
        draft=draft,
        draft_hash=draft_hash,
        prompt_set=str(prompt_set.written("name", "")),
        prompt_set_version=str(prompt_set.written("version", "")),
        prompt_set_checksum=str(prompt_set.checksum or (fingerprint(plain_data(prompt_set)) if prompt_set.model_fields_set else "")),
        config_hash=fingerprint(config_context(snapshot)),
        versions_hash=fingerprint(library_versions(snapshot)),
        ci_level=ci_level(snapshot),
        points=tuple(metric_points(snapshot)),
    )
