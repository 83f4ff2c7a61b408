"""The public entry points: load a prompt set, validate one, refresh a manifest's checksums."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specaudit.errors import InputError
from specaudit.prompts._collect import collect
from specaudit.prompts._manifest import (
    FileEntry,
    display_path,
    file_sha256,
    manifest_for,
    write_files_block,
)
from specaudit.prompts._model import (
    PromptSet,
    PromptSetWarning,
    ValidationReport,
    rows_checksum,
)
from specaudit.prompts._read import parse_column_map, read_file
from specaudit.prompts._select import (
    add_intersection,
    select_dimensions,
    stratified_sample,
)

WARNINGS_SHOWN = 5  # warnings of a prompt set shown one by one; the rest are counted


def load_prompts(
    source: str | Path,
    *,
    column_map: str | Mapping[str, str] | None = None,
    dimensions: str | Sequence[str] | None = None,
    per_group: int | None = None,
    seed: int = 0,
    intersect: str | Sequence[str] | None = None,
    split: str = "train",
) -> PromptSet:
    """Load, validate and optionally sample a prompt set.

    source: a set name in prompt_sets/ ("core"), a folder with manifest.yaml, a .jsonl/.json/
    .csv/.parquet file, a folder saved with `Dataset.save_to_disk`, or a Hub dataset id
    ("owner/name", or "hf:name" for an id without an owner). Everything is read with `datasets`.
    column_map: "text=question,id=qid,pair_id=pid,group:domain=category" (or a dict) for sources
    that do not use our field names. dimensions: keep only these (prompts labelled in none of
    them are dropped). intersect: e.g. ["domain", "dialect"] adds the attribute "domain×dialect".
    per_group: sample this many prompts per group (per intersection cell when `intersect` is
    given), whole pairs at a time: in a parallel dimension, per_group pair ids with every group's
    version of each. seed: the sampling seed, separate from any decoding seed (keep it at 0 so
    runs decoded with different seeds audit the same prompts). split: for Hub and saved datasets
    only. A source with a `messages` column (or `column_map="messages=COLUMN"`) gives multi-turn
    prompts: `Prompt.messages`, encoded with `prompt_token_ids` through the chat template.

    Raises InputError naming file, line and field when validation finds an error; warnings are
    issued as PromptSetWarning.
    """
    collected = collect(source, column_map=column_map, split=split)
    report = ValidationReport(str(source), tuple(collected.errors), tuple(collected.warnings), len(collected.prompts))
    report.raise_for_errors()
    for issue in collected.warnings[:WARNINGS_SHOWN]:
        warnings.warn(str(issue), PromptSetWarning, stacklevel=2)
    if len(collected.warnings) > WARNINGS_SHOWN:  # a set of 10,000 small groups gives one line, not 10,000
        more = len(collected.warnings) - WARNINGS_SHOWN
        warnings.warn(
            f"{source}: {more} more warning(s) ({len(collected.warnings)} in all); `specaudit prompts validate {source}` lists them",
            PromptSetWarning,
            stacklevel=2,
        )
    prompts, dims = select_dimensions(collected.prompts, collected.dimensions, dimensions, str(source))
    prompts, dims, intersection = add_intersection(prompts, dims, intersect, str(source))
    if per_group is not None:
        # The finest groups are the ones compared, so they are the ones balanced.
        strata = [intersection] if intersection else list(dims)
        prompts = stratified_sample(prompts, strata, per_group, seed, dims)
    return PromptSet(
        name=collected.name,
        version=collected.version,
        checksum=rows_checksum(prompts),
        source=collected.source,
        dimensions=dims,
        prompts=prompts,
        min_group_size=collected.min_group_size,
    )


def validate_prompt_set(source: str | Path, *, column_map: str | Mapping[str, str] | None = None, split: str = "train") -> ValidationReport:
    """Every error and warning of a source, each naming file, line and field.

    Errors (load_prompts refuses the set): unreadable or torn lines, missing/empty/duplicate ids
    and texts, missing or undeclared groups, incomplete pairs of a parallel dimension, groups
    below the manifest's min_group_size, checksum or row-count mismatch, a prompt over 64 KiB,
    malformed messages or provenance. Warnings: attributes no dimension declares, stray data
    files, rows without provenance, near-duplicates across dimensions (word-pair Jaccard >= 0.8),
    a group whose median length is over 1.5x another's; for sources without a manifest,
    duplicate texts and groups below 30 prompts.
    """
    collected = collect(source, column_map=column_map, split=split)
    return ValidationReport(str(source), tuple(collected.errors), tuple(collected.warnings), len(collected.prompts))


@dataclass(frozen=True)
class ChecksumEntry:
    file: str
    sha256: str
    rows: int
    recorded_sha256: str | None
    recorded_rows: int | None

    @property
    def status(self) -> str:
        if self.recorded_sha256 is None:
            return "new"
        return "ok" if (self.recorded_sha256, self.recorded_rows) == (self.sha256, self.rows) else "changed"


def update_checksums(source: str | Path, *, write: bool = False) -> list[ChecksumEntry]:
    """Recompute sha256 and row count of every data file of a set; with write=True, store them in manifest.yaml.

    Only the trailing `files:` block of the manifest is rewritten (comments above it survive).
    A file that cannot be read is an InputError: checksums of a broken file must not be recorded.
    """
    manifest = manifest_for(source)
    entries = []
    for spec in manifest.dimensions.values():
        path = manifest.directory / spec.file
        if not path.is_file():
            raise InputError(f"{display_path(path)} does not exist; the manifest's dimension '{spec.name}' names it.")
        result = read_file(path, parse_column_map(None))
        if result.failure is not None:
            file, line, message = result.failure
            where = f" line {line}" if line is not None else ""
            raise InputError(f"{file}{where} {message}; fix it before recording checksums.")
        recorded = manifest.files.get(spec.file, FileEntry(None, None))
        entries.append(ChecksumEntry(spec.file, file_sha256(path), len(result.rows), recorded.sha256, recorded.rows))
    if write:
        write_files_block(manifest.path, {e.file: FileEntry(e.sha256, e.rows) for e in entries})
    return entries
