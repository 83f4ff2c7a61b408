"""A total deadline per HTTP request: connect, send, the response headers and every read.

httpx's timeouts bound each network operation, so a server that sends one byte every few seconds
(or drips its headers) never times out. The endpoint backend's client is given a network backend
whose streams cap every operation at the time left before the deadline of the request running in
this thread (each request runs in one thread; a pooled connection serves one request at a time).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import httpcore

if TYPE_CHECKING:
    import httpx

_current = threading.local()


@contextmanager
def total_deadline(seconds: float) -> Iterator[float]:
    """Every network operation of this thread ends by `seconds` from now (the monotonic time it yields)."""
    previous = getattr(_current, "at", None)
    _current.at = time.monotonic() + seconds
    try:
        yield _current.at
    finally:
        _current.at = previous


def _capped(timeout: float | None) -> float | None:
    at = getattr(_current, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the request's total deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _capped(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _capped(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, _capped(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's synchronous backend, its streams capped by the thread's total deadline."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, local_address: str | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_tcp(host, port, _capped(timeout), local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_unix_socket(path, _capped(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def deadline_transport() -> httpx.HTTPTransport:
    """An httpx transport whose connections keep the thread's total deadline. Should a later httpx
    build its pool differently, the plain transport is returned: the backend still checks the
    deadline between the pieces of an answer."""
    import httpx

    transport = httpx.HTTPTransport()
    pool = getattr(transport, "_pool", None)
    if isinstance(pool, httpcore.ConnectionPool) and hasattr(pool, "_network_backend"):
        pool._network_backend = DeadlineBackend()
    return transport
