"""Where a model name points, decided without importing torch: a local path, the embedded
default, or a hub id, and whether the hub can be reached (so an offline run naming an uncached
model fails in a fraction of a second, not after a minute of retries)."""

from __future__ import annotations

import os

from specaudit.errors import InputError

DEFAULT_TARGET = "default"


def _is_local(name: str) -> bool:
    return name.startswith((".", "/", "~")) or os.path.exists(os.path.expanduser(name))


def _hub_reachable(timeout: float = 1.5) -> tuple[bool, str]:
    """(whether the Hugging Face endpoint accepts a connection within `timeout` s, its host)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    host = url.hostname or "huggingface.co"
    try:
        socket.create_connection((host, url.port or (443 if url.scheme == "https" else 80)), timeout=timeout).close()
    except OSError:
        return False, host
    return True, host


def hub_options(name: str) -> dict:
    """from_pretrained options for a hub id, decided before any hub call: offline (HF_HUB_OFFLINE,
    or the hub unreachable), a cached model loads from the cache alone and an uncached one fails
    at once naming it, instead of after a minute of retries."""
    from huggingface_hub import constants, try_to_load_from_cache

    try:
        cached = isinstance(try_to_load_from_cache(name, "config.json"), str)
    except ValueError:  # not a valid repo id: from_pretrained gives the precise message
        return {}
    offline = constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    why = "HF_HUB_OFFLINE is set"
    if not offline:
        reachable, host = _hub_reachable()
        if reachable:
            return {}
        why = f"no connection to {host}"
    if not cached:
        raise InputError(
            f"cannot load model {name!r}: it is not a local folder or GGUF file, not in the Hugging Face cache, "
            f"and the hub cannot be reached ({why}); connect to the network or pass a local model folder"
        )
    return {"local_files_only": True}
