"""Writing files so that readers never see half of one, and JSON that every consumer can parse.

The one home of these helpers for the whole package (docs/ARCHITECTURE.md, "Files on disk"):
manifest.json, snapshot.json, merged records, reports and exports all go through `write_atomic`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from specaudit.errors import InputError


def json_clean(value: Any) -> Any:
    """`value` with NaN and ±inf turned into null, numpy scalars into Python numbers and tuples into
    lists: strict JSON (RFC 8259), which browsers, jq and PostgreSQL accept."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return json_clean(value.item())
    return value


def write_atomic(path: str | Path, text: str) -> Path:
    """Write `text` to a temporary file beside `path` and rename it into place: a reader sees the
    old file or the new one, never half. A folder in the way or an unwritable place is an
    InputError naming the path; the temporary file is never left behind."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path} is a folder, not a file; remove it or write elsewhere")
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # per process: two writers never share one
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging.write_text(text, encoding="utf-8")
        os.replace(staging, path)
    except OSError as err:
        staging.unlink(missing_ok=True)
        raise InputError(f"cannot write {path}: {err.strerror or err}") from None
    return path


def write_json_atomic(path: str | Path, payload: Any) -> Path:
    """`payload` as indented strict JSON (see json_clean), written atomically."""
    text = json.dumps(json_clean(payload), indent=2, ensure_ascii=False, default=str, allow_nan=False)
    return write_atomic(path, text + "\n")


def check_output_folder(path: str | Path, option: str = "--out", *, create: bool = True) -> Path:
    """Refuse, before any work starts, an output folder that cannot be one: a path naming a file
    (or under one), or a folder this process cannot write into. Creates the folder if `create`."""
    path = Path(path)
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{option} {path}: {parent} is a file, not a folder; choose a folder path")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise InputError(f"{option} {path}: {parent} is not writable; choose a folder you can write to")
            break
    if not create:
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"{option} {path}: cannot create the folder ({err.strerror or err})") from None
    return path
