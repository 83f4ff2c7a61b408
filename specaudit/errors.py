"""The one error type the CLI turns into exit code 2 with a single clear sentence."""


class InputError(Exception):
    """Bad user input: a malformed file, a missing field, an unknown model, an impossible value.

    The message is one sentence that names what is wrong and where, and how to fix it when that
    is not obvious. The CLI prints it without a traceback and exits with status 2.
    """


class EngineError(InputError):
    """An engine's own failure on one request (a server's HTTP 5xx answer): mid-run it is a finding,
    recorded as a fault for that prompt and sample while the run goes on (specaudit.execution.faults);
    before anything runs (start-up, health checks) it stays bad input, one sentence and exit 2."""
