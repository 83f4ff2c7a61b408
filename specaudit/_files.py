"""Writing files so that readers never see half of one, and JSON that every consumer can parse.

The one home of these helpers for the whole package (docs/ARCHITECTURE.md, "Files on disk"):
manifest.json, snapshot.json, merged records, reports and exports all go through `write_atomic`
(or `write_all_atomic` for a set of files, `write_folder_atomic` for a folder of them), and every stage checks its output paths before it
starts work (`check_output_folder`, `check_output_paths`): an analysis must not spend minutes
scoring only to find its folder read-only.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
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


def json_text(payload: Any) -> str:
    """`payload` as indented strict JSON (see json_clean), as write_json_atomic writes it."""
    return json.dumps(json_clean(payload), indent=2, ensure_ascii=False, default=str, allow_nan=False)


def write_json_atomic(path: str | Path, payload: Any) -> Path:
    """`payload` as indented strict JSON (see json_clean), written atomically."""
    return write_atomic(path, json_text(payload) + "\n")


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
    except (OSError, ValueError) as err:  # ValueError: a NUL byte in the path
        raise InputError(f"{option} {path}: cannot create the folder ({getattr(err, 'strerror', None) or err})") from None
    return path


def check_output_paths(paths: Iterable[str | Path], what: str = "output") -> list[Path]:
    """Make sure each path can be written: its folder exists (created if need be) and accepts a new
    file, and the path is not a folder. Returns the paths; raises InputError naming the first that
    cannot be written. Creates nothing but the missing folders."""
    paths = [Path(p) for p in paths]
    probed: set[Path] = set()
    for path in paths:
        if path.is_dir():
            raise InputError(f"cannot write the {what} {path}: a folder of that name is in the way; move or remove it")
        folder = path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except (OSError, ValueError) as err:  # ValueError: a NUL byte in the path
            raise InputError(f"cannot create the {what} folder {folder}: {getattr(err, 'strerror', None) or err}") from None
        if folder in probed:
            continue
        try:  # a real write: permission bits, read-only mounts and immutable folders all show here
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".specaudit-probe-"):
                pass
        except OSError as err:
            raise InputError(f"cannot write the {what} into {folder}: {err.strerror or err}") from None
        probed.add(folder)
    return paths


def write_all_atomic(contents: Mapping[Path, str], what: str = "output") -> list[Path]:
    """Write several files all or none: every path is checked first, then each text is staged
    beside its file, then all are renamed into place. A reader never sees a partial set (a report
    whose fourth file failed must not leave three that look complete)."""
    paths = check_output_paths(contents, what)
    staged = {path: path.with_name(f".{path.name}.{os.getpid()}.tmp") for path in paths}
    try:
        for path, text in contents.items():
            staged[Path(path)].write_text(text, encoding="utf-8")
    except OSError as err:
        for staging in staged.values():
            staging.unlink(missing_ok=True)
        raise InputError(f"cannot write the {what} {path}: {err.strerror or err}") from None
    for path, staging in staged.items():
        os.replace(staging, path)
    return paths


def write_folder_atomic(out_dir: Path, write: Callable[[Path], dict[str, Path]]) -> dict[str, Path]:
    """`write(staging)` fills a staging folder beside `out_dir` that is then renamed into place in one
    step, so `out_dir` holds all of it or, on any failure, is left as it was (absent or empty); the
    paths `write` returned, as they lie under `out_dir`."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        files = write(staging)
        if out_dir.exists():  # an empty folder (its callers check that first)
            out_dir.rmdir()
        os.replace(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {name: out_dir / path.relative_to(staging) for name, path in files.items()}
