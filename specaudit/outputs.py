"""Output paths checked before any work or any write: a stage either writes all its files or none.

A report whose fourth file cannot be written must not leave the first three behind (a reader
would take them for a complete report), and an analysis must not spend minutes scoring only to
find its folder read-only. So every stage checks all its output paths first, then writes.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

from specaudit.errors import InputError


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
        except OSError as err:
            raise InputError(f"cannot create the {what} folder {folder}: {err.strerror or err}") from None
        if folder in probed:
            continue
        try:  # a real write: permission bits, read-only mounts and immutable folders all show here
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".specaudit-probe-"):
                pass
        except OSError as err:
            raise InputError(f"cannot write the {what} into {folder}: {err.strerror or err}") from None
        probed.add(folder)
    return paths
