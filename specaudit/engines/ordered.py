"""Records of concurrent requests, written in plan order: the executors that keep several requests
in flight (endpoint, llama-server) hand their futures here."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import CancelledError, Future, as_completed

from specaudit.contracts.run import Record
from specaudit.errors import InputError


def emit_in_plan_order(futures: dict[Future, int], emit: Callable[[Record], None]) -> None:
    """Emit each future's record as soon as every earlier one (by plan index) is written, so the
    file does not depend on which request finished first. The first InputError cancels the queued
    requests (those in flight still land) and is raised at the end; a bug or Ctrl-C cancels them and
    propagates. Whatever finished is written either way, gaps and all: a re-run fills the gaps."""
    finished: dict[int, Record] = {}
    next_index, error = 0, None

    def flush(everything: bool = False) -> None:
        nonlocal next_index
        for index in sorted(finished):
            if index != next_index and not everything:
                break
            emit(finished.pop(index))  # only this thread writes
            next_index = index + 1

    try:
        for future in as_completed(futures):
            try:
                finished[futures[future]] = future.result()
            except CancelledError:
                continue
            except InputError as err:
                if error is None:
                    error = err
                    for other in futures:
                        other.cancel()
                continue
            flush()
    except BaseException:
        for other in futures:
            other.cancel()
        raise
    finally:
        flush(everything=True)
    if error is not None:
        raise error
