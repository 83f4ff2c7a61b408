"""`specaudit ARGV` run in this process for the fuzz tests: thousands of examples cannot each pay a
subprocess's start-up."""

import contextlib
import io

from specaudit.cli import main


def run_cli(*argv: object) -> tuple[int, str]:
    """(exit code, stderr) of `specaudit ARGV`, run in this process."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exit_:  # argparse's usage errors
            code = exit_.code if isinstance(exit_.code, int) else 2
    return code, err.getvalue()
