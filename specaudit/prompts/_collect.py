"""From a source to checked prompts: resolve the source, read its rows, find every problem.

Validation and loading share this one path, so `validate` reports exactly what `load_prompts`
would refuse.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specaudit.errors import InputError
from specaudit.prompts._manifest import (
    DEFAULT_MIN_GROUP_SIZE,
    MANIFEST_NAME,
    Manifest,
    display_path,
    file_sha256,
    find_prompt_set,
    list_prompt_sets,
    read_manifest,
)
from specaudit.prompts._model import Issue, Prompt
from specaudit.prompts._read import (
    FILE_BUILDERS,
    ColumnMap,
    ReadResult,
    SourceRow,
    load_folder_or_hub,
    load_saved,
    looks_like_hub_id,
    parse_column_map,
    read_file,
)


@dataclass
class Collected:
    """Checked prompts of one source and what was found on the way."""

    name: str
    version: int | str | None
    source: str
    dimensions: dict[str, dict[str, Any]]
    prompts: list[Prompt]
    min_group_size: int | None
    issues: list[Issue] = field(default_factory=list)

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "warning"]


def collect(source: str | Path, *, column_map: Any = None, split: str = "train") -> Collected:
    """Resolve `source` (set name, manifest folder, data file, saved dataset, Hub id) and check its rows."""
    cmap = parse_column_map(column_map)
    text = str(source)
    path = Path(source)
    if path.exists():
        if (path.is_dir() and (path / MANIFEST_NAME).is_file()) or path.name == MANIFEST_NAME:
            return _collect_manifest(read_manifest(path), cmap)
        if path.is_dir():
            if (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file():
                return _collect_generic(load_saved(path, split, cmap), path.name, display_path(path))
            return _collect_generic(load_folder_or_hub(text, split, cmap, local=True), path.name, display_path(path))
        if path.suffix.lower() not in FILE_BUILDERS:
            raise InputError(f"{display_path(path)}: unsupported file type '{path.suffix}'; use .jsonl, .json, .csv or .parquet.")
        return _collect_generic(read_file(path, cmap), path.stem, display_path(path))
    if path.suffix.lower() in FILE_BUILDERS:
        raise InputError(f"{text} does not exist; check the path of the prompt file.")
    manifest = find_prompt_set(text) if "/" not in text and "\\" not in text else None
    if manifest is not None:
        return _collect_manifest(manifest, cmap)
    if looks_like_hub_id(text):
        hub_id = text[3:] if text.startswith("hf:") else text
        return _collect_generic(load_folder_or_hub(hub_id, split, cmap, local=False), hub_id, hub_id)
    known = ", ".join(m.name for m in list_prompt_sets()) or "none found"
    raise InputError(
        f"no prompt set, file or dataset named '{text}' (known sets: {known}); give a set name, a folder with "
        f"{MANIFEST_NAME}, a .jsonl/.csv/.parquet file, or a Hub dataset id like owner/name."
    )


# ------------------------------------------------------------------ row checks
def _error(row_or_file: SourceRow | str, field_name: str | None, message: str, line: int | None = None) -> Issue:
    return _issue("error", row_or_file, field_name, message, line)


def _warning(row_or_file: SourceRow | str, field_name: str | None, message: str, line: int | None = None) -> Issue:
    return _issue("warning", row_or_file, field_name, message, line)


def _issue(severity: str, where: SourceRow | str, field_name: str | None, message: str, line: int | None) -> Issue:
    if isinstance(where, SourceRow):
        return Issue(severity, where.file, where.line, field_name, message, where.unit)  # type: ignore[arg-type]
    return Issue(severity, where, line, field_name, message)  # type: ignore[arg-type]


def _as_label(value: Any, strict: bool) -> str | None | bool:
    """A string identifier from a cell: None when absent, False when unusable."""
    if value is None:
        return None
    if isinstance(value, str):
        return value if value.strip() else False
    # Ids and labels read from CSV/Parquet/Hub are often integers; only our own sets insist on strings.
    if not strict and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return False


# About a million tokens: more than any model's context, and far below what makes a tokenizer abort.
# Checked on load, before anything is tokenized; the run then checks token length against the model.
MAX_PROMPT_BYTES = 4 * 2**20


def _check_rows(rows: list[SourceRow], issues: list[Issue], *, strict: bool) -> list[tuple[Prompt, SourceRow]]:
    """Per-row checks (fields, types, duplicate ids and texts); returns the rows that became prompts."""
    good: list[tuple[Prompt, SourceRow]] = []
    first_id: dict[str, SourceRow] = {}
    first_text: dict[tuple[str, str], SourceRow] = {}
    for row in rows:
        ok = True
        prompt_id = _as_label(row.id, strict)
        if prompt_id is None or prompt_id is False:
            what = "is missing" if prompt_id is None else "must be a non-empty string"
            issues.append(_error(row, "id", f"{what}; every prompt needs a unique id"))
            ok = False
        if not isinstance(row.text, str):
            what = "is missing" if row.text is None else f"must be a string, not {type(row.text).__name__}"
            issues.append(_error(row, "text", what))
            ok = False
        elif not row.text.strip():
            issues.append(_error(row, "text", "is empty; write the prompt or delete the row"))
            ok = False
        elif len(row.text) > MAX_PROMPT_BYTES // 4 and len(row.text.encode("utf-8")) > MAX_PROMPT_BYTES:
            issues.append(_error(row, "text", f"is {len(row.text.encode('utf-8')) / 2**20:.1f} MiB, over the limit of "
                                 f"{MAX_PROMPT_BYTES // 2**20} MiB per prompt (more than any model's context holds)"))
            ok = False
        pair_id = _as_label(row.pair_id, strict)
        if pair_id is False:
            issues.append(_error(row, "pair_id", "must be a non-empty string or null"))
            ok = False
        attributes: dict[str, str] = {}
        if not isinstance(row.attributes, dict):
            issues.append(_error(row, "attributes", "must be an object mapping each dimension to a group"))
            ok = False
        else:
            for dim, group in row.attributes.items():
                label = _as_label(group, strict)
                if label is None:
                    continue  # tabular readers fill absent dimensions with null
                if label is False:
                    issues.append(_error(row, f"attributes.{dim}", "must be a non-empty string naming a group"))
                    ok = False
                    continue
                attributes[str(dim)] = label
        if isinstance(prompt_id, str):
            earlier = first_id.get(prompt_id)
            if earlier is not None:
                issues.append(_error(row, "id", f"duplicate id '{prompt_id}' (first on {_where(earlier, row)}); ids must be unique"))
                ok = False
            else:
                first_id[prompt_id] = row
        if isinstance(row.text, str) and row.text.strip():
            key = (row.file, " ".join(row.text.split()))
            earlier = first_text.get(key)
            if earlier is not None:
                message = f"duplicate text (same as {_where(earlier, row)})"
                if strict:
                    issues.append(_error(row, "text", message + "; each prompt of a file must be distinct"))
                    ok = False
                else:
                    issues.append(_warning(row, "text", message + "; it will be counted twice"))
            else:
                first_text[key] = row
        if ok:
            good.append((Prompt(prompt_id, row.text, attributes, pair_id or None), row))  # type: ignore[arg-type]
    return good


def _where(earlier: SourceRow, row: SourceRow) -> str:
    place = f"{earlier.unit} {earlier.line}"
    return place if earlier.file == row.file else f"{earlier.file} {place}"


def _group_size_issues(
    prompts: list[Prompt], dimensions: dict[str, dict[str, Any]], minimum: int, severity: str, where: dict[str, str]
) -> list[Issue]:
    issues = []
    for dim, spec in dimensions.items():
        counts = Counter(p.attributes[dim] for p in prompts if dim in p.attributes)
        for group in spec["groups"]:
            n = counts.get(group, 0)
            if n < minimum:
                issues.append(Issue(
                    severity, where.get(dim, "?"), None, f"attributes.{dim}",  # type: ignore[arg-type]
                    f"group '{group}' has {n} prompt(s), fewer than the minimum of {minimum}; "
                    "add prompts (comparisons on smaller groups are too uncertain to report)",
                ))
    return issues


def _pair_issues(checked: list[tuple[Prompt, SourceRow]], dim: str, groups: tuple[str, ...]) -> list[Issue]:
    """A parallel dimension needs exactly one member per group in every pair."""
    issues: list[Issue] = []
    members: dict[str, dict[str, SourceRow]] = defaultdict(dict)
    for prompt, row in checked:
        if dim not in prompt.attributes or prompt.attributes[dim] not in groups:
            continue
        if prompt.pair_id is None:
            issues.append(_error(row, "pair_id", f"is missing; prompts of the parallel dimension '{dim}' share a pair_id with their other renderings"))
            continue
        group = prompt.attributes[dim]
        earlier = members[prompt.pair_id].get(group)
        if earlier is not None:
            issues.append(_error(row, "pair_id", f"pair '{prompt.pair_id}' already has a '{group}' member (on {_where(earlier, row)}); each pair holds one prompt per group"))
            continue
        members[prompt.pair_id][group] = row
    for pair_id, by_group in members.items():
        missing = [g for g in groups if g not in by_group]
        if missing:
            first = min(by_group.values(), key=lambda r: r.line)
            issues.append(_error(first, "pair_id", f"pair '{pair_id}' has no member for group(s) {', '.join(missing)}; add the missing rendering(s) or remove the pair"))
    return issues


# ------------------------------------------------------------- manifest sets
def _collect_manifest(manifest: Manifest, cmap: ColumnMap) -> Collected:
    if not cmap.empty:
        raise InputError(f"prompt set '{manifest.name}' has a manifest, so a column map does not apply; drop column_map / --column-map.")
    issues: list[Issue] = []
    folder = manifest.directory
    manifest_file = display_path(manifest.path)
    checked: list[tuple[Prompt, SourceRow]] = []
    rows: list[SourceRow] = []
    dim_files: dict[str, str] = {}
    unreadable: set[str] = set()  # their group counts would only repeat the read error
    for dim, spec in manifest.dimensions.items():
        path = folder / spec.file
        dim_files[dim] = display_path(path)
        if not path.is_file():
            issues.append(_error(manifest_file, f"dimensions.{dim}.file", f"'{spec.file}' does not exist next to the manifest"))
            unreadable.add(dim)
            continue
        entry = manifest.files.get(spec.file)
        actual = file_sha256(path)
        fix = f"if the edit was intended, run `specaudit prompts checksum {manifest.name} --write`"
        if entry is None or entry.sha256 is None:
            issues.append(_error(manifest_file, f"files.{spec.file}.sha256",
                                 f"no checksum recorded for {spec.file}; record it with `specaudit prompts checksum {manifest.name} --write`"))
        elif entry.sha256 != actual:
            issues.append(_error(manifest_file, f"files.{spec.file}.sha256",
                                 f"checksum mismatch: {spec.file} has sha256 {actual[:12]}… but the manifest records {entry.sha256[:12]}…; {fix}"))
        result: ReadResult = read_file(path, cmap)
        if result.failure is not None:
            file, line, message = result.failure
            issues.append(Issue("error", file, line, None, message))
            unreadable.add(dim)
            continue
        if entry is not None and entry.rows is not None and entry.rows != len(result.rows):
            issues.append(_error(manifest_file, f"files.{spec.file}.rows",
                                 f"{spec.file} has {len(result.rows)} rows but the manifest records {entry.rows}; {fix}"))
        rows.extend(result.rows)
    # One pass over all files so that duplicate ids are caught across files too.
    row_dim = {shown: dim for dim, shown in dim_files.items()}
    for prompt, row in _check_rows(rows, issues, strict=True):
        own_dim = row_dim.get(row.file)
        ok = True
        attributes = dict(prompt.attributes)
        if own_dim is not None and own_dim not in attributes:
            issues.append(_error(row, f"attributes.{own_dim}", f"is missing; every row of {Path(row.file).name} needs a '{own_dim}' group"))
            ok = False
        for dim, group in list(attributes.items()):
            spec = manifest.dimensions.get(dim)
            if spec is None:
                issues.append(_warning(row, f"attributes.{dim}", f"'{dim}' is not a dimension declared in {MANIFEST_NAME}; the attribute is ignored"))
                del attributes[dim]
            elif group not in spec.groups:
                issues.append(_error(row, f"attributes.{dim}", f"unknown group '{group}' for dimension '{dim}' (declared: {', '.join(spec.groups)}); fix the row or declare the group in {MANIFEST_NAME}"))
                ok = False
        if ok:
            checked.append((Prompt(prompt.id, prompt.text, attributes, prompt.pair_id), row))
    for dim, spec in manifest.dimensions.items():
        if spec.parallel:
            issues.extend(_pair_issues(checked, dim, spec.groups))
    dimensions = {
        dim: {"groups": list(spec.groups), "reference": spec.reference, "parallel": spec.parallel}
        for dim, spec in manifest.dimensions.items()
    }
    prompts = [prompt for prompt, _ in checked]
    readable = {d: spec for d, spec in dimensions.items() if d not in unreadable}
    issues.extend(_group_size_issues(prompts, readable, manifest.min_group_size, "error", dim_files))
    used = {spec.file for spec in manifest.dimensions.values()}
    for extra in sorted(p.name for p in folder.iterdir() if p.suffix.lower() in FILE_BUILDERS and p.name not in used):
        issues.append(_warning(manifest_file, None, f"{extra} is in the set's folder but no dimension uses it; it is not loaded"))
    for listed in sorted(set(manifest.files) - used):
        issues.append(_warning(manifest_file, f"files.{listed}", f"{listed} has a checksum but no dimension uses it"))
    return Collected(manifest.name, manifest.version, display_path(folder), dimensions, prompts, manifest.min_group_size, issues)


# ------------------------------------------------------------- other sources
def _collect_generic(result: ReadResult, name: str, source: str) -> Collected:
    issues: list[Issue] = []
    if result.failure is not None:
        file, line, message = result.failure
        issues.append(Issue("error", file, line, None, message))
        return Collected(name, None, source, {}, [], None, issues)
    checked = _check_rows(result.rows, issues, strict=False)
    prompts = [prompt for prompt, _ in checked]
    dimensions = _infer_dimensions(prompts)
    label = result.rows[0].file if result.rows else source
    if not dimensions and prompts:
        issues.append(_warning(label, None, "no prompt has a group attribute, so only overall results are possible; map one with group:NAME=COLUMN"))
    for dim in dimensions:
        missing = [row for prompt, row in checked if dim not in prompt.attributes]
        if missing:
            issues.append(_warning(missing[0], f"attributes.{dim}", f"{len(missing)} prompt(s) have no '{dim}' group (this is the first); they are left out of the '{dim}' comparison"))
    # Without a manifest there is no declared minimum to enforce, so small groups only warn.
    issues.extend(_group_size_issues(prompts, dimensions, DEFAULT_MIN_GROUP_SIZE, "warning", {d: label for d in dimensions}))
    return Collected(name, None, source, dimensions, prompts, DEFAULT_MIN_GROUP_SIZE, issues)


def _infer_dimensions(prompts: list[Prompt]) -> dict[str, dict[str, Any]]:
    """Dimensions of a source without a manifest: groups sorted; parallel if every pair is complete."""
    groups: dict[str, dict[str, None]] = {}
    for prompt in prompts:
        for dim, group in prompt.attributes.items():
            groups.setdefault(dim, {})[group] = None
    dimensions = {}
    for dim, seen in groups.items():
        members = [p for p in prompts if dim in p.attributes]
        pairs: dict[str, list[str]] = defaultdict(list)
        for p in members:
            if p.pair_id is not None:
                pairs[p.pair_id].append(p.attributes[dim])
        parallel = (
            len(seen) > 1
            and all(p.pair_id is not None for p in members)
            and all(sorted(g) == sorted(seen) for g in pairs.values())
        )
        dimensions[dim] = {"groups": sorted(seen), "reference": None, "parallel": parallel}
    return dimensions
