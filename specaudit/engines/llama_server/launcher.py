"""Starting and stopping llama-server processes: one per side (speculation off / on), each on a
free 127.0.0.1 port, with a bounded lifetime, reaped on every exit path.

Every process is started in its own session (so a Ctrl-C in the terminal reaches specaudit, which
then stops it, rather than killing it mid-answer) and registered with an atexit hook, so even an
exit that skips `stop` (an uncaught error) kills it. A watchdog timer kills it after
`lifetime_s` whatever happens, so a hung run cannot leave a server holding the CPU.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from specaudit.errors import InputError

HOST = "127.0.0.1"
_LIVE: set[LlamaServer] = set()
_LIVE_LOCK = threading.Lock()


def free_port() -> int:
    """A port the kernel just gave out on 127.0.0.1 (bound and released; llama-server binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


@dataclass(eq=False)
class LlamaServer:
    """One llama-server process. `start` returns once /health answers 200 (the model loaded)."""

    binary: Path
    args: list[str]
    name: str  # "vanilla" or "speculative", for messages
    lifetime_s: float = 3600.0
    port: int = 0
    process: subprocess.Popen | None = None
    log_path: Path | None = None
    _watchdog: threading.Timer | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def command(self) -> list[str]:
        return [str(self.binary), *self.args, "--host", HOST, "--port", str(self.port)]

    def start(self, timeout_s: float) -> LlamaServer:
        import httpx

        for attempt in range(3):  # a port taken between free_port and the bind: try another
            self.port = free_port()
            log = tempfile.NamedTemporaryFile(prefix=f"specaudit-llama-server-{self.name}-", suffix=".log", delete=False)
            self.log_path = Path(log.name)
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
            log.close()
            with _LIVE_LOCK:
                _LIVE.add(self)
            self._watchdog = threading.Timer(self.lifetime_s, self.stop)
            self._watchdog.daemon = True
            self._watchdog.start()
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    break
                try:
                    if httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.25)
            code = self.process.poll()
            tail = self.log_tail()
            self.stop()
            if code is None:
                raise InputError(
                    f"llama-server ({self.name}) did not become ready within {timeout_s:g} s; raise llama_server.startup_timeout_s "
                    f"or see its log {self.log_path}"
                )
            if "bind" in tail.lower() and attempt < 2:
                continue
            raise InputError(
                f"llama-server ({self.name}) exited with status {code} while starting: {tail or 'no output'} (log: {self.log_path})"
            )
        raise InputError(f"llama-server ({self.name}) could not bind a free port on {HOST}")

    def log_tail(self, lines: int = 3) -> str:
        try:
            text = self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""
        kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        return " | ".join(kept)[:400]

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """Stop the process: SIGTERM to its process group, SIGKILL after 5 s; safe to call twice."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        process = self.process
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
            except ProcessLookupError:
                pass
        with _LIVE_LOCK:
            _LIVE.discard(self)


def stop_all() -> None:
    """Stop every server this process started and has not stopped (the atexit hook)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for server in live:
        server.stop()


atexit.register(stop_all)


class ServerPair:
    """The spec-OFF and spec-ON servers of a run, started together and stopped together
    (`with ServerPair(...) as servers:`, or `start` / `stop`): a failure to start the second
    stops the first."""

    def __init__(self, servers: dict[str, LlamaServer], startup_timeout_s: float) -> None:
        self.servers = servers
        self.startup_timeout_s = startup_timeout_s

    def start(self) -> ServerPair:
        try:
            for server in self.servers.values():
                server.start(self.startup_timeout_s)
        except BaseException:  # an error, or Ctrl-C while a model loads
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()

    def __enter__(self) -> ServerPair:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
