"""The objects the rest of specaudit sees: prompts, prompt sets, validation findings."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from specaudit.errors import InputError


class PromptSetWarning(UserWarning):
    """A prompt set is usable but something about it weakens the comparison (small group, duplicate text)."""


Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": "..."}


@dataclass(frozen=True)
class Prompt:
    """One prompt: the row format `{"id", "text", "pair_id", "attributes"}` shared by every stage.

    `messages` holds a multi-turn conversation (ending with a user turn) when the source gave one;
    `text` is then its plain transcript (for lengths, duplicate checks and runs without a chat
    template). `metadata` keeps the row's other fields (provenance, features, zipf, ...): it
    describes the prompt but is not part of its identity, so it is left out of equality and of
    the prompt checksum.
    """

    id: str
    text: str
    attributes: dict[str, str] = field(default_factory=dict)
    pair_id: str | None = None
    messages: tuple[Message, ...] | None = None
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"id": self.id, "text": self.text, "pair_id": self.pair_id, "attributes": dict(self.attributes)}
        if self.messages is not None:
            record["messages"] = [dict(m) for m in self.messages]
        return record


def transcript(messages: list[Message] | tuple[Message, ...]) -> str:
    """The plain text of a conversation: one "role: content" paragraph per turn."""
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages)


def rows_checksum(prompts: list[Prompt]) -> str:
    """sha256 over the canonical JSON of the rows, in order: two runs used the same prompts iff equal."""
    digest = hashlib.sha256()
    for prompt in prompts:
        line = json.dumps(prompt.to_record(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        digest.update(line.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


@dataclass(frozen=True)
class PromptSet:
    """Prompts ready for a run, with what identifies them in a run manifest.

    `dimensions` maps each dimension to `{"groups": [...], "reference": group or None,
    "parallel": bool}`, plus `"pairing": "reference"` where pairs link the reference group to one
    other group each (see DimensionSpec). `parallel` says that group comparisons may be paired
    (signed-rank) on shared pair ids rather than independent.
    """

    name: str
    version: int | str | None
    checksum: str
    source: str
    dimensions: dict[str, dict[str, Any]]
    prompts: list[Prompt]
    min_group_size: int | None = None

    def __len__(self) -> int:
        return len(self.prompts)

    def to_records(self) -> list[dict[str, Any]]:
        """The prompts as plain rows (`id`, `text`, `pair_id`, `attributes`), in order."""
        return [prompt.to_record() for prompt in self.prompts]

    def manifest_entry(self) -> dict[str, Any]:
        """What a run's manifest.json records about the prompts it used."""
        return {
            "name": self.name,
            "version": self.version,
            "checksum": self.checksum,
            "source": self.source,
            "n_prompts": len(self.prompts),
            "dimensions": {name: dimension_entry(spec) for name, spec in self.dimensions.items()},
        }

    def groups(self, dimension: str) -> dict[str, list[Prompt]]:
        """Prompts of each group of a dimension, groups in declared order."""
        if dimension not in self.dimensions:
            known = ", ".join(self.dimensions) or "none"
            raise InputError(f"prompt set '{self.name}' has no dimension '{dimension}'; its dimensions are: {known}.")
        by_group: dict[str, list[Prompt]] = {group: [] for group in self.dimensions[dimension]["groups"]}
        for prompt in self.prompts:
            group = prompt.attributes.get(dimension)
            if group is not None:
                by_group.setdefault(group, []).append(prompt)
        return by_group


def dimension_entry(spec: dict[str, Any]) -> dict[str, Any]:
    """A dimension as recorded in a run manifest; `pairing` only where it is not the default."""
    entry = {"groups": list(spec["groups"]), "reference": spec["reference"], "parallel": spec["parallel"]}
    if spec.get("pairing") == "reference":
        entry["pairing"] = "reference"
    if spec.get("labels"):
        entry["labels"] = dict(spec["labels"])  # readable group names, for reports
    return entry


@dataclass(frozen=True)
class Issue:
    """One finding of validation, located as precisely as the source allows."""

    severity: Literal["error", "warning"]
    file: str
    line: int | None
    field: str | None
    message: str
    unit: Literal["line", "row"] = "line"  # "row" where the source has no line numbers (CSV, Parquet, HF)

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f" {self.unit} {self.line}"
        if self.field:
            where += f", field '{self.field}'"
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class ValidationReport:
    """Errors (the set cannot be used) and warnings (it can, with a caveat) for one source."""

    source: str
    errors: tuple[Issue, ...]
    warnings: tuple[Issue, ...]
    n_prompts: int

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_for_errors(self) -> None:
        """Raise InputError with the first error, pointing at `validate` for the full list."""
        if not self.errors:
            return
        first = str(self.errors[0]).rstrip(".")
        more = len(self.errors) - 1
        suffix = f" ({more} more error{'s' if more > 1 else ''}: run `specaudit prompts validate {self.source}`)" if more else ""
        raise InputError(f"{first}{suffix}.")

    def __str__(self) -> str:
        lines = [f"error: {issue}" for issue in self.errors] + [f"warning: {issue}" for issue in self.warnings]
        lines.append(f"{self.source}: {self.n_prompts} prompts, {len(self.errors)} error(s), {len(self.warnings)} warning(s)")
        return "\n".join(lines)
