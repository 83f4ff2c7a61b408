"""Reading rows from any source through the `datasets` library, remembering where each row came from.

Sources: JSON Lines / JSON / CSV / Parquet files (load_dataset's packaged builders), a dataset
saved with `save_to_disk`, a folder of data files, or a dataset id on the Hugging Face Hub.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specaudit.errors import InputError
from specaudit.prompts._manifest import display_path

FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
FIELDS = ("id", "text", "pair_id")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class ColumnMap:
    """Which source column feeds each prompt field; `groups` maps dimension -> column."""

    id: str | None = None
    text: str | None = None
    pair_id: str | None = None
    groups: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.id or self.text or self.pair_id or self.groups)


def parse_column_map(spec: str | Mapping[str, str] | ColumnMap | None) -> ColumnMap:
    """Parse `"text=question,id=qid,group:domain=category"` (or the same as a dict) into a ColumnMap."""
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
        if key.startswith("group:"):
            dimension = key[len("group:"):].strip()
            if not dimension:
                raise InputError("column map entry 'group:=...' names no dimension; write group:NAME=COLUMN, e.g. group:domain=category.")
            groups[dimension] = column
        elif key in FIELDS:
            values[key] = column
        else:
            raise InputError(f"column map field '{key}' is unknown; use id, text, pair_id or group:NAME.")
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


def _locate_json_failure(lines: list[str]) -> tuple[int | None, str]:
    """Find the first JSON Lines line that is not a JSON object, for a message that names it."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
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
    try:
        document = json.loads(text)
    except ValueError:  # datasets also reads JSON Lines from a .json file
        line, message = _locate_json_failure(text.splitlines())
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
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as err:
            return ReadResult([], (shown, None, f"is not UTF-8 text ({err.reason} at byte {err.start})"))
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
    except Exception as err:  # datasets wraps pyarrow/pandas parse errors in several exception types
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
    except Exception as err:
        raise InputError(f"{display_path(path)} could not be opened with datasets.load_from_disk ({err}).") from None
    return read_dataset(_pick_split(loaded, split, display_path(path)), display_path(path), column_map)


def load_folder_or_hub(source: str, split: str, column_map: ColumnMap, *, local: bool) -> ReadResult:
    """A folder of data files or a Hub dataset id, through datasets.load_dataset."""
    import datasets

    try:
        with _quiet_datasets():
            loaded = datasets.load_dataset(source, split=split)
    except Exception as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        hint = "check the folder holds .jsonl/.csv/.parquet files" if local else (
            "check the dataset id and split, and that you are online or have it cached"
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


def _map_rows(dataset: Any, column_map: ColumnMap, label: str, numbers: list[int], unit: str) -> list[SourceRow]:
    """Apply the column map: our own field names by default, `group:NAME=COLUMN` for attributes."""
    import datasets

    columns = list(dataset.column_names)
    available = ", ".join(columns)

    def column_for(field_name: str, mapped: str | None, required: bool) -> str | None:
        if mapped is not None:
            if mapped not in columns:
                raise InputError(
                    f"{label} has no column '{mapped}' (mapped to {field_name}); its columns are: {available}."
                )
            return mapped
        if field_name in columns:
            return field_name
        if required:
            raise InputError(
                f"{label} has no '{field_name}' column (columns: {available}); map one with "
                f"column_map / --column-map {field_name}=COLUMN."
            )
        return None

    text_col = column_for("text", column_map.text, required=True)
    id_col = column_for("id", column_map.id, required=False)
    pair_col = column_for("pair_id", column_map.pair_id, required=False)
    attr_col = "attributes" if "attributes" in columns else None
    group_cols = {dim: column_for(f"group:{dim}", col, required=True) for dim, col in column_map.groups.items()}

    # Hub datasets often store categories as ClassLabel integers; users mean the names.
    features = getattr(dataset, "features", None) or {}
    label_names = {
        col: feature.int2str
        for col, feature in features.items()
        if isinstance(feature, datasets.ClassLabel)
    }

    def value(row: dict[str, Any], col: str | None) -> Any:
        if col is None:
            return None
        raw = row.get(col)
        if col in label_names and isinstance(raw, int) and raw >= 0:
            return label_names[col](raw)
        return raw

    rows: list[SourceRow] = []
    for index, row in enumerate(dataset):
        attributes: Any = value(row, attr_col) if attr_col else {}
        if isinstance(attributes, str) and attributes.strip().startswith("{"):
            # CSV has no nested values: accept attributes written as a JSON object string.
            try:
                attributes = json.loads(attributes)
            except json.JSONDecodeError:
                pass
        if attributes is None:
            attributes = {}
        if group_cols and isinstance(attributes, dict):
            attributes = dict(attributes)
            for dim, col in group_cols.items():
                attributes[dim] = value(row, col)
        # Without an id column, the row position is the id: stable for a given source, so runs resume.
        prompt_id = value(row, id_col) if id_col else f"row-{index + 1}"
        rows.append(
            SourceRow(label, numbers[index], unit, prompt_id, value(row, text_col), value(row, pair_col), attributes)
        )
    return rows
