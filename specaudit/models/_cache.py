"""Where specaudit keeps what it builds or fetches once (converted and fetched models), and the
file checksum that identifies them. No torch here: naming a cached file stays light."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_root() -> Path:
    root = os.environ.get("SPECAUDIT_CACHE")
    if root:
        return Path(root)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("specaudit"))


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
