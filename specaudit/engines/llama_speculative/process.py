"""One `llama-speculative` process: run, wait, and give back its stdout, stderr and timings.

Each record is its own process (the example decodes one prompt and exits), so a record does not
depend on any other: both models load, the prompt is evaluated from an empty cache, and the
program's own timers (`encoded ... in S seconds`, `decoded ... in S seconds`) time the work
without the load. A non-zero exit or a timeout raises EngineError with the log's last lines.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass

from specaudit.errors import EngineError

_TIMER = re.compile(r"(encoded|decoded) +(\d+) tokens in +([0-9.]+) seconds")


@dataclass(frozen=True)
class Finished:
    stdout: bytes
    stderr: str
    process_s: float  # the whole process, models' load included
    encode_s: float | None  # the prompt pass, by the program's timer
    decode_s: float | None  # generation, by the program's timer


def run(argv: list[str], timeout_s: float) -> Finished:
    started = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise EngineError(f"llama-speculative ran past {timeout_s:g} s and was killed") from None
    elapsed = time.perf_counter() - started
    stderr = done.stderr.decode("utf-8", errors="replace")
    if done.returncode != 0:
        tail = " | ".join(line for line in stderr.strip().splitlines()[-3:])
        raise EngineError(f"llama-speculative exited with status {done.returncode}: {tail or 'no output'}")
    timers = {kind: float(seconds) for kind, _, seconds in _TIMER.findall(stderr)}
    return Finished(done.stdout, stderr, elapsed, timers.get("encoded"), timers.get("decoded"))


__all__ = ["Finished", "run"]
