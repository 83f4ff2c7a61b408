"""From a source to checked prompts: resolve the source, read its rows, find every problem.

Validation and loading share this one path, so `validate` reports exactly what `load_prompts`
would refuse.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specaudit.errors import InputError
from specaudit.prompts._checks import (
    MAX_PROMPT_BYTES,
    count_words,
    length_gaps,
    near_duplicates,
)
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
from specaudit.prompts._model import Issue, Prompt, transcript
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
        hub_id = text.removeprefix("hf:")
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


ROLES = ("system", "user", "assistant")
PROVENANCE_FIELDS = ("author", "date", "method")


def _check_messages(row: SourceRow, issues: list[Issue]) -> tuple[dict[str, str], ...] | None:
    """A conversation as a tuple of {role, content}, or None (with an error) when malformed."""
    messages = row.messages
    if not isinstance(messages, (list, tuple)) or not messages:
        issues.append(_error(row, "messages", "must be a non-empty list of {role, content} turns"))
        return None
    turns = []
    for number, message in enumerate(messages, start=1):
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if role not in ROLES or not isinstance(content, str) or not content.strip():
            issues.append(
                _error(
                    row, "messages", f"turn {number} must be {{role, content}} with role one of {', '.join(ROLES)} and non-empty content"
                )
            )
            return None
        turns.append({"role": role, "content": content})
    if turns[-1]["role"] != "user":
        issues.append(_error(row, "messages", "must end with a user turn: the audited model writes the next assistant turn"))
        return None
    return tuple(turns)


def _check_provenance(row: SourceRow, issues: list[Issue]) -> bool:
    """Provenance, where a row gives one, must name author, date and method."""
    provenance = row.extra.get("provenance")
    if provenance is None:
        return True
    if not isinstance(provenance, dict) or not all(
        isinstance(provenance.get(key), str) and provenance[key].strip() for key in PROVENANCE_FIELDS
    ):
        issues.append(_error(row, "provenance", "must be an object with non-empty author, date and method strings"))
        return False
    return True


def _size_of(row: SourceRow) -> int:
    if isinstance(row.text, str):
        return len(row.text.encode("utf-8"))
    if isinstance(row.messages, (list, tuple)):
        return sum(len(str(m.get("content", "")).encode("utf-8")) for m in row.messages if isinstance(m, dict))
    return 0


def _check_rows(rows: list[SourceRow], issues: list[Issue], *, strict: bool) -> list[tuple[Prompt, SourceRow]]:
    """Per-row checks (fields, types, size, duplicate ids and texts); returns the rows that became prompts."""
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
        size = _size_of(row)
        if size > MAX_PROMPT_BYTES:
            # Checked first and alone: nothing else (duplicate checks, shingles, tokenizers) reads it.
            name = f"prompt '{prompt_id}'" if isinstance(prompt_id, str) else "this prompt"
            issues.append(
                _error(
                    row,
                    "text" if row.messages is None else "messages",
                    f"{name} is {size:,} bytes, over the limit of {MAX_PROMPT_BYTES:,} bytes for one prompt; shorten it or remove the row",
                )
            )
            continue
        if row.problem is not None:
            issues.append(_error(row, row.problem[0], row.problem[1]))
            ok = False
        messages = None
        text = row.text
        if row.messages is not None and row.text is not None:
            issues.append(_error(row, "messages", "the row gives both text and messages; keep one"))
            ok = False
        elif row.messages is not None:
            messages = _check_messages(row, issues)
            ok = ok and messages is not None
            text = transcript(messages) if messages is not None else None
        elif row.problem is None or row.problem[0] not in ("text", "messages"):
            if not isinstance(row.text, str):
                if row.text is None:
                    what = "is missing"
                elif isinstance(row.text, (list, tuple)):
                    what = (
                        "is a list; pick one element with --column-map text=COLUMN[0], "
                        "or map a list of {role, content} turns with messages=COLUMN"
                    )
                else:
                    what = f"must be a string, not {type(row.text).__name__}"
                issues.append(_error(row, "text", what))
                ok = False
            elif not row.text.strip():
                issues.append(_error(row, "text", "is empty; write the prompt or delete the row"))
                ok = False
        pair_id = _as_label(row.pair_id, strict)
        if pair_id is False:
            issues.append(_error(row, "pair_id", "must be a non-empty string or null"))
            ok = False
        if strict and not _check_provenance(row, issues):
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
        if isinstance(text, str) and text.strip():
            key = (row.file, " ".join(text.split()))
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
            good.append((Prompt(prompt_id, text, attributes, pair_id or None, messages, dict(row.extra)), row))  # type: ignore[arg-type]
    return good


def _where(earlier: SourceRow, row: SourceRow) -> str:
    place = f"{earlier.unit} {earlier.line}"
    return place if earlier.file == row.file else f"{earlier.file} {place}"


def _group_size_issues(
    prompts: list[Prompt], dimensions: dict[str, dict[str, Any]], minimum: int | dict[str, int], severity: str, where: dict[str, str]
) -> list[Issue]:
    issues = []
    for dim, spec in dimensions.items():
        least = minimum[dim] if isinstance(minimum, dict) else minimum
        counts = Counter(p.attributes[dim] for p in prompts if dim in p.attributes)
        for group in spec["groups"]:
            n = counts.get(group, 0)
            if n < least:
                issues.append(
                    Issue(
                        severity,
                        where.get(dim, "?"),
                        None,
                        f"attributes.{dim}",  # type: ignore[arg-type]
                        f"group '{group}' has {n} prompt(s), fewer than the set's minimum of {least} (the set's minimum group size, "
                        f"min_group_size in its manifest, else {DEFAULT_MIN_GROUP_SIZE}); "
                        "add prompts (a small group's intervals are wide, and audits cannot sample more of it than it holds)",
                    )
                )
    return issues


def _length_issues(prompts: list[Prompt], dimensions: dict[str, dict[str, Any]], where: dict[str, str]) -> list[Issue]:
    """A warning per group whose median length (words) is more than 1.5x the shortest group's."""
    issues = []
    for dim, spec in dimensions.items():
        lengths: dict[str, list[int]] = {g: [] for g in spec["groups"]}
        for prompt in prompts:
            group = prompt.attributes.get(dim)
            if group in lengths:
                lengths[group].append(count_words(prompt.text))
        for gap in length_gaps(lengths):
            issues.append(
                Issue(
                    "warning",
                    where.get(dim, "?"),
                    None,
                    f"attributes.{dim}",
                    f"group '{gap.group}' has median length {gap.median:g} words, {gap.ratio:.2f}x group "
                    f"'{gap.shortest_group}' ({gap.shortest_median:g}); length alone moves acceptance rates, so match "
                    "lengths across groups or compare within length bands",
                )
            )
    return issues


def _near_duplicate_issues(checked: list[tuple[Prompt, SourceRow]], row_dim: dict[str, str]) -> list[Issue]:
    """Near-identical prompts filed under different dimensions (each file is one dimension)."""
    items = [(prompt, row) for prompt, row in checked if row.file in row_dim]
    found = near_duplicates([p.text for p, _ in items], [row_dim[r.file] for _, r in items])
    issues = []
    for pair in found:
        (first, first_row), (second, second_row) = items[pair.first], items[pair.second]
        issues.append(
            _warning(
                second_row,
                "text",
                f"prompt '{second.id}' nearly duplicates '{first.id}' of {Path(first_row.file).name} "
                f"(word Jaccard {pair.similarity:.2f}); one request under two dimensions is counted under both, "
                "so reword or drop one",
            )
        )
    return issues


def _provenance_issues(checked: list[tuple[Prompt, SourceRow]]) -> list[Issue]:
    """One warning per file whose rows lack provenance (who wrote them, when, how)."""
    missing: dict[str, list[SourceRow]] = defaultdict(list)
    for prompt, row in checked:
        if "provenance" not in prompt.metadata:
            missing[row.file].append(row)
    return [
        _warning(
            rows[0],
            "provenance",
            f"{len(rows)} row(s) of {Path(file).name} have no provenance (this is the first); record author, date and method on every row",
        )
        for file, rows in missing.items()
    ]


def _pair_issues(
    checked: list[tuple[Prompt, SourceRow]],
    dim: str,
    groups: tuple[str, ...],
    reference: str | None = None,
    pairing: str | None = "all_groups",
) -> list[Issue]:
    """A parallel dimension needs one member per group in every pair (pairing "all_groups"), or
    one reference-group member and one member of one other group (pairing "reference")."""
    issues: list[Issue] = []
    members: dict[str, dict[str, SourceRow]] = defaultdict(dict)
    for prompt, row in checked:
        if dim not in prompt.attributes or prompt.attributes[dim] not in groups:
            continue
        if prompt.pair_id is None:
            issues.append(
                _error(row, "pair_id", f"is missing; prompts of the parallel dimension '{dim}' share a pair_id with their other renderings")
            )
            continue
        group = prompt.attributes[dim]
        earlier = members[prompt.pair_id].get(group)
        if earlier is not None:
            issues.append(
                _error(
                    row,
                    "pair_id",
                    f"pair '{prompt.pair_id}' already has a '{group}' member (on {_where(earlier, row)}); each pair holds one prompt per group",
                )
            )
            continue
        if pairing == "reference" and group != reference and any(g != reference for g in members[prompt.pair_id]):
            other = next(g for g in members[prompt.pair_id] if g != reference)
            issues.append(
                _error(
                    row,
                    "pair_id",
                    f"pair '{prompt.pair_id}' already has a '{other}' member; in '{dim}' each pair links one '{reference}' prompt to one prompt of one other group",
                )
            )
            continue
        members[prompt.pair_id][group] = row
    for pair_id, by_group in members.items():
        if pairing == "reference":
            missing = (
                []
                if len(by_group) == 2 and reference in by_group
                else ([reference] if reference not in by_group else [f"one group other than '{reference}'"])
            )
        else:
            missing = [g for g in groups if g not in by_group]
        if missing:
            first = min(by_group.values(), key=lambda r: r.line)
            issues.append(
                _error(
                    first,
                    "pair_id",
                    f"pair '{pair_id}' has no member for group(s) {', '.join(missing)}; add the missing rendering(s) or remove the pair",
                )
            )
    return issues


# ------------------------------------------------------------- manifest sets
def _dimension_dict(spec: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"groups": list(spec.groups), "reference": spec.reference, "parallel": spec.parallel}
    if spec.pairing == "reference":
        entry["pairing"] = "reference"
    if spec.labels:
        entry["labels"] = dict(spec.labels)
    return entry


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
            issues.append(
                _error(
                    manifest_file,
                    f"files.{spec.file}.sha256",
                    f"no checksum recorded for {spec.file}; record it with `specaudit prompts checksum {manifest.name} --write`",
                )
            )
        elif entry.sha256 != actual:
            issues.append(
                _error(
                    manifest_file,
                    f"files.{spec.file}.sha256",
                    f"checksum mismatch: {spec.file} has sha256 {actual[:12]}… but the manifest records {entry.sha256[:12]}…; {fix}",
                )
            )
        result: ReadResult = read_file(path, cmap)
        if result.failure is not None:
            file, line, message = result.failure
            issues.append(Issue("error", file, line, None, message))
            unreadable.add(dim)
            continue
        if entry is not None and entry.rows is not None and entry.rows != len(result.rows):
            issues.append(
                _error(
                    manifest_file,
                    f"files.{spec.file}.rows",
                    f"{spec.file} has {len(result.rows)} rows but the manifest records {entry.rows}; {fix}",
                )
            )
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
                issues.append(
                    _warning(row, f"attributes.{dim}", f"'{dim}' is not a dimension declared in {MANIFEST_NAME}; the attribute is ignored")
                )
                del attributes[dim]
            elif group not in spec.groups:
                issues.append(
                    _error(
                        row,
                        f"attributes.{dim}",
                        f"unknown group '{group}' for dimension '{dim}' (declared: {', '.join(spec.groups)}); fix the row or declare the group in {MANIFEST_NAME}",
                    )
                )
                ok = False
        if ok:
            checked.append((replace(prompt, attributes=attributes), row))
    for dim, spec in manifest.dimensions.items():
        if spec.parallel:
            issues.extend(_pair_issues(checked, dim, spec.groups, spec.reference, spec.pairing))
    dimensions = {dim: _dimension_dict(spec) for dim, spec in manifest.dimensions.items()}
    prompts = [prompt for prompt, _ in checked]
    readable = {d: spec for d, spec in dimensions.items() if d not in unreadable}
    minimums = {d: spec.min_group_size or manifest.min_group_size for d, spec in manifest.dimensions.items()}
    issues.extend(_group_size_issues(prompts, readable, minimums, "error", dim_files))
    compared = {d: spec for d, spec in readable.items() if manifest.dimensions[d].compare_lengths}
    issues.extend(_length_issues(prompts, compared, dim_files))
    issues.extend(_near_duplicate_issues(checked, row_dim))
    issues.extend(_provenance_issues(checked))
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
        issues.append(
            _warning(label, None, "no prompt has a group attribute, so only overall results are possible; map one with group:NAME=COLUMN")
        )
    for dim in dimensions:
        missing = [row for prompt, row in checked if dim not in prompt.attributes]
        if missing:
            issues.append(
                _warning(
                    missing[0],
                    f"attributes.{dim}",
                    f"{len(missing)} prompt(s) have no '{dim}' group (this is the first); they are left out of the '{dim}' comparison",
                )
            )
    # Without a manifest there is no declared minimum to enforce, so small groups only warn.
    issues.extend(_group_size_issues(prompts, dimensions, DEFAULT_MIN_GROUP_SIZE, "warning", {d: label for d in dimensions}))
    issues.extend(_length_issues(prompts, dimensions, {d: label for d in dimensions}))
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
        parallel = len(seen) > 1 and all(p.pair_id is not None for p in members) and all(sorted(g) == sorted(seen) for g in pairs.values())
        dimensions[dim] = {"groups": sorted(seen), "reference": None, "parallel": parallel}
    return dimensions
