"""Prompt-set manifests (manifest.yaml): finding sets, reading them, refreshing their checksums.

The format is documented in prompt_sets/core/DATASHEET.md ("Manifest format").
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specaudit.errors import InputError

MANIFEST_NAME = "manifest.yaml"
ENV_VAR = "SPECAUDIT_PROMPT_SETS"
# A set's minimum group size: the prompts each group must hold *in the set* (its manifest's
# `min_group_size`, this where a set has no manifest or its manifest names none), so audits can draw
# their --per-group sample from it. Not the gate's checked group size (contracts.MIN_CHECKED_PROMPTS,
# prompts a run audited per group); docs/glossary.md names both.
DEFAULT_MIN_GROUP_SIZE = 30


@dataclass(frozen=True)
class DimensionSpec:
    """One dimension of a set: the file holding its prompts and the groups it may use.

    `parallel: true` in the manifest: every pair_id has one prompt in every group.
    `parallel: reference`: every pair_id links one prompt of the reference group to one prompt of
    one other group (e.g. each rare-word item and its own common twin), so the reference group
    holds a twin for every pair. `min_group_size` overrides the set's minimum for this dimension.
    `compare_lengths: false` turns off the length-balance warning where word counts are not
    comparable between groups (languages: a translation is as long as its language makes it).
    """

    name: str
    file: str
    groups: tuple[str, ...]
    reference: str | None
    parallel: bool
    pairing: str | None = None  # "all_groups", "reference", or None when not parallel
    min_group_size: int | None = None
    compare_lengths: bool = True
    labels: dict[str, str] | None = None  # group -> readable name ("sae" -> "Standard American English"), for reports


@dataclass(frozen=True)
class FileEntry:
    sha256: str | None
    rows: int | None


@dataclass(frozen=True)
class Manifest:
    path: Path
    name: str
    version: int
    description: str
    license: str | None
    min_group_size: int
    dimensions: dict[str, DimensionSpec]
    files: dict[str, FileEntry]

    @property
    def directory(self) -> Path:
        return self.path.parent

    @property
    def n_prompts(self) -> int | None:
        """Prompt count recorded in the manifest (None where a file has no recorded count)."""
        counts = [self.files.get(spec.file, FileEntry(None, None)).rows for spec in self.dimensions.values()]
        return None if any(count is None for count in counts) else sum(counts)


def display_path(path: Path) -> str:
    """Path as users should see it in messages: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def prompt_set_dirs() -> list[Path]:
    """Folders searched for named sets: $SPECAUDIT_PROMPT_SETS, ./prompt_sets, then the checkout's prompt_sets/."""
    candidates: list[Path] = [Path(p) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    candidates.append(Path.cwd() / "prompt_sets")
    # In a source checkout (or editable install) the sets sit next to the package.
    for parent in Path(__file__).resolve().parents:
        if (parent / "prompt_sets").is_dir():
            candidates.append(parent / "prompt_sets")
            break
    found: list[Path] = []
    for candidate in candidates:
        if candidate.is_dir() and candidate.resolve() not in {f.resolve() for f in found}:
            found.append(candidate)
    return found


def _require(condition: bool, path: Path, field: str, problem: str) -> None:
    if not condition:
        raise InputError(f"{display_path(path)}, field '{field}': {problem}.")


def read_manifest(path: str | Path) -> Manifest:
    """Parse and structurally check a manifest.yaml (a folder holding one is accepted too)."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_NAME
    if not path.is_file():
        raise InputError(f"{display_path(path)} does not exist; a prompt-set folder needs a {MANIFEST_NAME}.")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"{display_path(path)}{where} is not valid YAML ({getattr(err, 'problem', err)}).") from None
    _require(isinstance(data, dict), path, "(top level)", "must be a mapping with name, version, dimensions")
    name = data.get("name")
    _require(isinstance(name, str) and bool(name.strip()), path, "name", "must be a non-empty string")
    version = data.get("version")
    _require(isinstance(version, int) and not isinstance(version, bool), path, "version", "must be an integer")
    min_size = data.get("min_group_size", DEFAULT_MIN_GROUP_SIZE)
    _require(isinstance(min_size, int) and min_size >= 1, path, "min_group_size", "must be a positive integer")
    raw_dims = data.get("dimensions")
    _require(isinstance(raw_dims, dict) and bool(raw_dims), path, "dimensions", "must map each dimension name to its file and groups")
    dimensions: dict[str, DimensionSpec] = {}
    for dim_name, spec in raw_dims.items():
        where = f"dimensions.{dim_name}"
        _require(isinstance(spec, dict), path, where, "must be a mapping with file, groups, reference, parallel")
        file = spec.get("file")
        _require(isinstance(file, str) and bool(file), path, f"{where}.file", "must name a data file next to the manifest")
        groups = spec.get("groups")
        _require(
            isinstance(groups, list) and bool(groups) and all(isinstance(g, str) and g for g in groups),
            path,
            f"{where}.groups",
            "must be a non-empty list of group names",
        )
        _require(len(set(groups)) == len(groups), path, f"{where}.groups", "lists a group twice")
        reference = spec.get("reference")
        _require(reference is None or reference in groups, path, f"{where}.reference", f"'{reference}' is not one of the groups")
        parallel = spec.get("parallel", False)
        _require(isinstance(parallel, bool) or parallel == "reference", path, f"{where}.parallel", "must be true, false or reference")
        if parallel == "reference":
            _require(
                reference is not None and len(groups) >= 2,
                path,
                f"{where}.reference",
                "'parallel: reference' pairs each prompt with a reference-group twin, so name the reference group",
            )
        pairing = "reference" if parallel == "reference" else ("all_groups" if parallel else None)
        own_min = spec.get("min_group_size")
        _require(
            own_min is None or (isinstance(own_min, int) and not isinstance(own_min, bool) and own_min >= 1),
            path,
            f"{where}.min_group_size",
            "must be a positive integer",
        )
        compare_lengths = spec.get("compare_lengths", True)
        _require(isinstance(compare_lengths, bool), path, f"{where}.compare_lengths", "must be true or false")
        labels = spec.get("labels")
        _require(
            labels is None or (isinstance(labels, dict) and all(isinstance(v, str) and v.strip() for v in labels.values())),
            path,
            f"{where}.labels",
            "must map groups to readable names, e.g. {sae: Standard American English}",
        )
        unknown = sorted(set(labels or {}) - set(groups))
        _require(not unknown, path, f"{where}.labels", f"names group(s) {', '.join(map(str, unknown))} that are not among the groups")
        dimensions[str(dim_name)] = DimensionSpec(
            str(dim_name),
            file,
            tuple(groups),
            reference,
            bool(parallel),
            pairing,
            own_min,
            compare_lengths,
            dict(labels) if labels else None,
        )
    raw_files = data.get("files") or {}
    _require(isinstance(raw_files, dict), path, "files", "must map each data file to its sha256")
    files: dict[str, FileEntry] = {}
    for file_name, entry in raw_files.items():
        entry = entry or {}
        _require(isinstance(entry, dict), path, f"files.{file_name}", "must be a mapping with sha256 and rows")
        sha = entry.get("sha256")
        rows = entry.get("rows")
        _require(
            sha is None or (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha) is not None),
            path,
            f"files.{file_name}.sha256",
            "must be 64 lowercase hex digits",
        )
        _require(rows is None or (isinstance(rows, int) and rows >= 0), path, f"files.{file_name}.rows", "must be a count")
        files[str(file_name)] = FileEntry(sha, rows)
    description = data.get("description") or ""
    license_ = data.get("license")
    return Manifest(path, name, version, str(description).strip(), license_, min_size, dimensions, files)


def list_prompt_sets() -> list[Manifest]:
    """Every named set found in the search folders (first one wins when names repeat)."""
    manifests: dict[str, Manifest] = {}
    for folder in prompt_set_dirs():
        for manifest_path in sorted(folder.glob(f"*/{MANIFEST_NAME}")):
            manifest = read_manifest(manifest_path)
            manifests.setdefault(manifest.name, manifest)
    return list(manifests.values())


def find_prompt_set(name: str) -> Manifest | None:
    """The manifest of a named set, or None when no search folder holds one."""
    for folder in prompt_set_dirs():
        candidate = folder / name / MANIFEST_NAME
        if candidate.is_file():
            return read_manifest(candidate)
    return None


def manifest_for(source: str | Path) -> Manifest:
    """A set name or a folder/manifest path, as a Manifest; anything else is an input error."""
    path = Path(source)
    if path.is_file() and path.name != MANIFEST_NAME:
        raise InputError(
            f"{display_path(path)} is a data file, not a prompt set; give a set name or a folder with {MANIFEST_NAME} (for a data file use `specaudit prompts stats`)."
        )
    if path.exists():
        return read_manifest(path)
    manifest = find_prompt_set(str(source))
    if manifest is None:
        known = ", ".join(m.name for m in list_prompt_sets()) or "none"
        raise InputError(f"no prompt set named '{source}' (known sets: {known}); give a set name or a folder holding {MANIFEST_NAME}.")
    return manifest


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def render_files_block(entries: dict[str, FileEntry]) -> str:
    lines = ["files:"]
    for file_name, entry in entries.items():
        lines.append(f"  {file_name}:")
        lines.append(f"    sha256: {entry.sha256}")
        lines.append(f"    rows: {entry.rows}")
    return "\n".join(lines) + "\n"


def write_files_block(manifest_path: Path, entries: dict[str, FileEntry]) -> None:
    """Replace the trailing `files:` block of a manifest, keeping everything above it (comments too)."""
    text = manifest_path.read_text(encoding="utf-8")
    match = re.search(r"^files:.*$", text, flags=re.MULTILINE)
    head = text[: match.start()] if match else text
    if head and not head.endswith("\n"):
        head += "\n"
    new_text = head + render_files_block(entries)
    # Only the files block changes, so a manifest that still parses afterwards is a correct edit.
    tmp = manifest_path.with_suffix(".yaml.tmp")
    tmp.write_text(new_text, encoding="utf-8")
    try:
        before = manifest_as_dict(read_manifest(manifest_path))
        after = manifest_as_dict(read_manifest(tmp))
        before.pop("files"), after.pop("files")
        safe = before == after
    except InputError:
        safe = False
    if not safe:
        tmp.unlink()
        raise InputError(
            f"{display_path(manifest_path)}: could not rewrite the files block safely; make `files:` the last key of the manifest."
        )
    os.replace(tmp, manifest_path)


def manifest_as_dict(manifest: Manifest) -> dict[str, Any]:
    return {
        "name": manifest.name,
        "version": manifest.version,
        "description": manifest.description,
        "license": manifest.license,
        "min_group_size": manifest.min_group_size,
        "dimensions": {
            name: {
                "file": d.file,
                "groups": list(d.groups),
                "reference": d.reference,
                "parallel": d.parallel,
                "pairing": d.pairing,
                "min_group_size": d.min_group_size,
                "compare_lengths": d.compare_lengths,
                **({"labels": d.labels} if d.labels else {}),
            }
            for name, d in manifest.dimensions.items()
        },
        "files": {name: {"sha256": e.sha256, "rows": e.rows} for name, e in manifest.files.items()},
    }
