"""Reading rows from any source through the `datasets` library, remembering where each row came from.

Sources: JSON Lines / JSON / CSV / Parquet files (load_dataset's packaged builders), a dataset
saved with `save_to_disk`, a folder of data files, or a dataset id on the Hugging Face Hub.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specaudit.errors import InputError
from specaudit.prompts._manifest import display_path

FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
FIELDS = ("id", "text", "pair_id", "messages")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# A column, optionally indexed into a list: "question", "turns[0]", "turns[-1]".
_COLUMN_REF = re.compile(r"^(?P<column>[^\[\]]+?)(?:\[(?P<index>-?\d+)\])?$")


@dataclass(frozen=True)
class ColumnMap:
    """Which source column feeds each prompt field; `groups` maps dimension -> column.

    Each value may index into a list column: `turns[0]` is the first element of `turns`.
    `messages` names a column holding a conversation (a list of {role, content}).
    """

    id: str | None = None
    text: str | None = None
    pair_id: str | None = None
    messages: str | None = None
    groups: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.id or self.text or self.pair_id or self.messages or self.groups)


def _split_ref(ref: str) -> tuple[str, int | None]:
    match = _COLUMN_REF.match(ref)
    if match is None:
        raise InputError(f"column map value '{ref}' is not a column name or COLUMN[INDEX], e.g. turns[0].")
    index = match.group("index")
    return match.group("column").strip(), (int(index) if index is not None else None)


def parse_column_map(spec: str | Mapping[str, str] | ColumnMap | None) -> ColumnMap:
    """Parse `"text=question,id=qid,group:domain=category"` (or the same as a dict) into a ColumnMap.

    `text=turns[0]` takes the first element of a list column; `messages=conversation` reads a
    multi-turn conversation (list of {role, content}) that goes through the chat template.
    """
    if spec is None:
        return ColumnMap()
    if isinstance(spec, ColumnMap):
        return spec
    if isinstance(spec, str):
        pairs: list[tuple[str, str]] = []
        for item in (part.strip() for part in spec.split(",")):
            if not item:
                continue
            if "=" not in item:
                raise InputError(f"column map entry '{item}' has no '='; write FIELD=COLUMN, e.g. text=question,group:domain=category.")
            key, column = (s.strip() for s in item.split("=", 1))
            pairs.append((key, column))
    elif isinstance(spec, Mapping):
        pairs = [(str(k).strip(), str(v).strip()) for k, v in spec.items()]
    else:
        raise InputError(f"column_map must be a string like 'text=question,group:domain=category' or a dict, not {type(spec).__name__}.")
    values: dict[str, str] = {}
    groups: dict[str, str] = {}
    for key, column in pairs:
        if not column:
            raise InputError(f"column map entry '{key}=' names no column; write {key}=COLUMN.")
        _split_ref(column)  # refuse a malformed COLUMN[INDEX] here, before any data is read
        if key.startswith("group:"):
            dimension = key[len("group:") :].strip()
            if not dimension:
                raise InputError("column map entry 'group:=...' names no dimension; write group:NAME=COLUMN, e.g. group:domain=category.")
            groups[dimension] = column
        elif key in FIELDS:
            values[key] = column
        else:
            raise InputError(f"column map field '{key}' is unknown; use id, text, pair_id, messages or group:NAME.")
    if "text" in values and "messages" in values:
        raise InputError("column map gives both text and messages; map one (messages for a conversation, text for one prompt).")
    return ColumnMap(groups=groups, **values)


@dataclass(frozen=True)
class SourceRow:
    """One row as read, before validation: the mapped fields plus its location."""

    file: str
    line: int
    unit: str  # "line" for JSON Lines, "row" for tabular sources
    id: Any
    text: Any
    pair_id: Any
    attributes: Any
    messages: Any = None
    extra: dict[str, Any] = field(default_factory=dict)  # the row's other non-null fields
    # Set when a mapped COLUMN[INDEX] could not be applied to this row: (field, message).
    problem: tuple[str, str] | None = None


@dataclass(frozen=True)
class ReadResult:
    rows: list[SourceRow]
    # A source that could not be read at all (torn JSON line, empty file): (file, line, message).
    failure: tuple[str, int | None, str] | None = None


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """datasets logs its own copy of every parse error; we report a better one, so silence it meanwhile."""
    import datasets

    level = datasets.logging.get_verbosity()
    bars = datasets.utils.are_progress_bars_disabled()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.logging.set_verbosity(level)
        if not bars:
            datasets.enable_progress_bars()


BOM = "\ufeff"


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSON Lines text: split at \n only (str.splitlines also splits at U+2028,
    U+2029 and other characters that JSON allows raw inside a string)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _bom_problem(text: str) -> str | None:
    if text.startswith(BOM):
        return "starts with a UTF-8 byte-order mark (BOM), which JSON does not allow; save the file as UTF-8 without BOM"
    return None


def _locate_json_failure(lines: list[str]) -> tuple[int | None, str]:
    """Find the first JSON Lines line that is not a JSON object, for a message that names it."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except RecursionError:
            return number, "is nested too deeply to be a prompt (JSON arrays or objects inside each other over ~1000 levels)"
        except json.JSONDecodeError as err:
            return number, f"is not valid JSON ({err.msg} at column {err.colno}); the line looks torn or truncated, fix or delete it"
        if not isinstance(value, dict):
            return number, f"is a JSON {type(value).__name__}, not an object; each line must be one prompt object"
    return None, "could not be read by datasets"


def _json_document_problem(path: Path) -> tuple[int | None, str] | None:
    """(line, message) when a .json file is neither a JSON array/object nor JSON Lines of objects."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        return None, f"is not UTF-8 text ({err.reason} at byte {err.start})"
    if _bom_problem(text):
        return 1, _bom_problem(text)
    try:
        document = json.loads(text)
    except RecursionError:
        return None, "is nested too deeply to be a prompt file (JSON arrays or objects inside each other over ~1000 levels)"
    except ValueError:  # datasets also reads JSON Lines from a .json file
        line, message = _locate_json_failure(jsonl_lines(text))
        return (line, message) if line is not None else None
    if not isinstance(document, (list, dict)):
        return None, f"holds a JSON {type(document).__name__}, not a list of prompt objects"
    return None


def read_file(path: Path, column_map: ColumnMap) -> ReadResult:
    """Rows of one JSONL/JSON/CSV/Parquet file, read with datasets.load_dataset."""
    import datasets

    shown = display_path(path)
    builder = FILE_BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise InputError(f"{shown}: unsupported file type '{path.suffix}'; use .jsonl, .json, .csv or .parquet.")
    line_numbers: list[int] | None = None
    lines: list[str] = []
    if path.suffix.lower() == ".jsonl":
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            return ReadResult([], (shown, None, f"is not UTF-8 text ({err.reason} at byte {err.start})"))
        if _bom_problem(text):
            return ReadResult([], (shown, 1, _bom_problem(text)))
        lines = jsonl_lines(text)
        # datasets skips blank lines, so row i of the dataset is the i-th non-blank line of the file.
        line_numbers = [n for n, line in enumerate(lines, start=1) if line.strip()]
        if not line_numbers:
            return ReadResult([], (shown, None, "is empty; a prompt file needs at least one JSON object per line"))
        # Checked here, not left to datasets: pyarrow's JSON reader crashes the process (SIGSEGV)
        # on some lines that are valid JSON but not objects, e.g. a file holding `null`.
        line, message = _locate_json_failure(lines)
        if line is not None:
            return ReadResult([], (shown, line, message))
    elif path.stat().st_size == 0:
        return ReadResult([], (shown, None, "is empty"))
    elif path.suffix.lower() == ".json":  # the same pyarrow crash, on a document that is `null`
        problem = _json_document_problem(path)
        if problem:
            return ReadResult([], (shown, *problem))
    try:
        with _quiet_datasets():
            # force_redownload: datasets' cache is keyed on path and mtime, which an in-place edit can
            # keep; rebuilding a small local file costs milliseconds and is never stale.
            dataset = datasets.load_dataset(builder, data_files=str(path), split="train", download_mode="force_redownload")
    except Exception as err:  # noqa: BLE001 -- datasets wraps pyarrow/pandas parse errors in several exception types
        if builder == "json" and lines:
            line, message = _locate_json_failure(lines)
            if line is not None:
                return ReadResult([], (shown, line, message))
        reason = str(err.__cause__ or err).strip().splitlines()[0] if str(err.__cause__ or err).strip() else type(err).__name__
        return ReadResult([], (shown, None, f"could not be read by datasets ({reason})"))
    if line_numbers is not None and len(line_numbers) != len(dataset):
        line_numbers = None  # datasets saw a different row count; fall back to row numbers
    unit = "line" if line_numbers is not None else "row"
    numbers = line_numbers if line_numbers is not None else list(range(1, len(dataset) + 1))
    return ReadResult(_map_rows(dataset, column_map, shown, numbers, unit))


def read_dataset(dataset: Any, label: str, column_map: ColumnMap) -> ReadResult:
    """Rows of an in-memory datasets.Dataset (from the Hub or load_from_disk)."""
    return ReadResult(_map_rows(dataset, column_map, label, list(range(1, len(dataset) + 1)), "row"))


def load_saved(path: Path, split: str, column_map: ColumnMap) -> ReadResult:
    import datasets

    try:
        with _quiet_datasets():
            loaded = datasets.load_from_disk(str(path))
    except Exception as err:  # noqa: BLE001 -- any failure to open is reported as bad input
        raise InputError(f"{display_path(path)} could not be opened with datasets.load_from_disk ({err}).") from None
    return read_dataset(_pick_split(loaded, split, display_path(path)), display_path(path), column_map)


def load_folder_or_hub(source: str, split: str, column_map: ColumnMap, *, local: bool) -> ReadResult:
    """A folder of data files or a Hub dataset id, through datasets.load_dataset."""
    import datasets

    try:
        with _quiet_datasets():
            loaded = datasets.load_dataset(source, split=split)
    except Exception as err:  # noqa: BLE001 -- any failure to load is reported as bad input
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        hint = (
            "check the folder holds .jsonl/.csv/.parquet files"
            if local
            else ("check the dataset id and split, and that you are online or have it cached")
        )
        raise InputError(f"datasets could not load '{source}' split '{split}' ({reason}); {hint}.") from None
    label = display_path(Path(source)) if local else source
    return read_dataset(loaded, label, column_map)


def _pick_split(loaded: Any, split: str, label: str) -> Any:
    import datasets

    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise InputError(f"{label} has no split '{split}'; its splits are: {', '.join(loaded)}.")
        return loaded[split]
    return loaded


def looks_like_hub_id(source: str) -> bool:
    return source.startswith("hf:") or _HUB_ID.match(source) is not None


def _as_written(value: Any) -> Any:
    """A value as the file wrote it: pyarrow's JSON reader turns "2026-12-01" into a timestamp."""
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _as_written(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_as_written(v) for v in value]
    return value


class _IndexMissing(Exception):
    """A COLUMN[INDEX] map that does not apply to one row (not a list, or too short)."""


def _map_rows(dataset: Any, column_map: ColumnMap, label: str, numbers: list[int], unit: str) -> list[SourceRow]:
    """Apply the column map: our own field names by default, `group:NAME=COLUMN` for attributes."""
    import datasets

    columns = list(dataset.column_names)
    available = ", ".join(columns)

    def column_for(field_name: str, mapped: str | None, required: bool) -> tuple[str, int | None] | None:
        if mapped is not None:
            column, index = _split_ref(mapped)
            if column not in columns:
                raise InputError(f"{label} has no column '{column}' (mapped to {field_name}); its columns are: {available}.")
            return column, index
        if field_name in columns:
            return field_name, None
        if required:
            raise InputError(
                f"{label} has no '{field_name}' column (columns: {available}); map one with "
                f"column_map / --column-map {field_name}=COLUMN (COLUMN[0] for the first element of a list, "
                "messages=COLUMN for a conversation)."
            )
        return None

    if column_map.messages is not None:
        text_ref, messages_ref = None, column_for("messages", column_map.messages, required=True)
    elif column_map.text is not None:
        text_ref, messages_ref = column_for("text", column_map.text, required=True), None
    else:
        # Our own files may mix rows with `text` and rows with `messages` (each row gives one).
        messages_ref = column_for("messages", None, required=False)
        text_ref = column_for("text", None, required=messages_ref is None)
    id_ref = column_for("id", column_map.id, required=False)
    pair_ref = column_for("pair_id", column_map.pair_id, required=False)
    attr_col = "attributes" if "attributes" in columns else None
    group_refs = {dim: column_for(f"group:{dim}", col, required=True) for dim, col in column_map.groups.items()}
    used = {ref[0] for ref in (text_ref, messages_ref, id_ref, pair_ref, *group_refs.values()) if ref is not None}
    if attr_col:
        used.add(attr_col)
    extra_cols = [c for c in columns if c not in used]

    # Hub datasets often store categories as ClassLabel integers; users mean the names.
    features = getattr(dataset, "features", None) or {}
    label_names = {col: feature.int2str for col, feature in features.items() if isinstance(feature, datasets.ClassLabel)}

    def value(row: dict[str, Any], ref: tuple[str, int | None] | None) -> Any:
        if ref is None:
            return None
        col, index = ref
        raw = row.get(col)
        if index is not None:
            if raw is None:
                return None
            if not isinstance(raw, (list, tuple)):
                raise _IndexMissing(f"column '{col}' holds a {type(raw).__name__}, not a list, so {col}[{index}] does not apply")
            if not -len(raw) <= index < len(raw):
                raise _IndexMissing(f"column '{col}' has {len(raw)} element(s), so {col}[{index}] does not exist")
            return raw[index]
        if col in label_names and isinstance(raw, int) and raw >= 0:
            return label_names[col](raw)
        return raw

    rows: list[SourceRow] = []
    for index, row in enumerate(dataset):
        attributes: Any = row.get(attr_col) if attr_col else {}
        if isinstance(attributes, str) and attributes.strip().startswith("{"):
            # CSV has no nested values: accept attributes written as a JSON object string.
            try:
                attributes = json.loads(attributes)
            except json.JSONDecodeError:
                pass
        if attributes is None:
            attributes = {}
        problem: tuple[str, str] | None = None
        mapped: dict[str, Any] = {}
        for name, ref in (("text", text_ref), ("messages", messages_ref), ("id", id_ref), ("pair_id", pair_ref)):
            try:
                mapped[name] = value(row, ref)
            except _IndexMissing as err:
                mapped[name], problem = None, (name, str(err))
        if group_refs and isinstance(attributes, dict):
            attributes = dict(attributes)
            for dim, ref in group_refs.items():
                try:
                    attributes[dim] = value(row, ref)
                except _IndexMissing as err:
                    attributes[dim], problem = None, (f"group:{dim}", str(err))
        # Without an id column, the row position is the id: stable for a given source, so runs resume.
        prompt_id = mapped["id"] if id_ref else f"row-{index + 1}"
        extra = {c: _as_written(row[c]) for c in extra_cols if row.get(c) is not None}
        rows.append(
            SourceRow(
                label, numbers[index], unit, prompt_id, mapped["text"], mapped["pair_id"], attributes, mapped["messages"], extra, problem
            )
        )
    return rows
