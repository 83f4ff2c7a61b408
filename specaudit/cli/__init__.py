"""Command line: the parser and `main`; one module per command group, one thin function per
subcommand. Parsing only; the work lives in the package."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import TYPE_CHECKING

from specaudit._validation import did_you_mean, register_typed
from specaudit.cli.gate import add_gate
from specaudit.cli.mitigate import add_mitigate
from specaudit.cli.models import add_models
from specaudit.cli.monitor import add_monitor
from specaudit.cli.prompts import add_prompts
from specaudit.cli.report import add_report
from specaudit.cli.run import add_analyze, add_audit, add_merge, add_run
from specaudit.cli.selftest import add_selftest
from specaudit.cli.traffic import add_proxy, add_traffic
from specaudit.contracts.engines import ENGINES, resolve
from specaudit.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TextIO


# -------------------------------------------------------------------------- main
_COMMAND_PARSER = "_command_parser"  # where the innermost command's parser is left on the namespace


class _Parser(argparse.ArgumentParser):
    """argparse with a suggestion for a mistyped flag or choice (Python 3.11 has no suggest_on_error),
    and the usage of the command the mistake was made in: `audit --per-grup` prints audit's usage,
    not specaudit's. Every subcommand's parser is one too (argparse makes them of the parent's class)."""

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if not hasattr(namespace, _COMMAND_PARSER):  # the innermost parser returns first
            setattr(namespace, _COMMAND_PARSER, self)
        return namespace, extras

    def parse_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        namespace, extras = self.parse_known_args(args, namespace)
        command = vars(namespace).pop(_COMMAND_PARSER, self)
        if extras:
            flags = [word.partition("=")[0] for word in extras if word.startswith("-")]
            known = [flag for flag in command._option_string_actions if flag.startswith("--")]
            hint = next((hint for hint in (did_you_mean(flag, known) for flag in flags) if hint), "")
            command.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return namespace

    def _check_value(self, action: argparse.Action, value: object) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as err:
            hint = did_you_mean(str(value), map(str, action.choices or ()))
            if not hint:
                raise
            raise argparse.ArgumentError(action, f"{err.message}{hint}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="specaudit",
        description="Audit speculative decoding for correctness and fairness.",
    )
    from specaudit import __version__

    parser.add_argument("--version", action="version", version=f"specaudit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_run(sub)
    add_merge(sub)
    add_analyze(sub)
    add_audit(sub)
    add_selftest(sub)
    add_mitigate(sub)
    add_prompts(sub)
    add_report(sub)
    add_gate(sub)
    add_monitor(sub)
    groups = {"": sub, "models": add_models(sub)}
    for spec in ENGINES.values():  # an engine's own sub-commands (`llama-server build`, `models export-openvino`)
        for group, add in spec.commands:
            resolve(add)(groups[group])
    add_traffic(sub)
    add_proxy(sub)
    return parser


def _one_line_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None, line: str | None = None
) -> str:
    return f"specaudit: warning: {message}\n"


# Exit codes, one meaning each: scripts and CI tell "the gate failed" from "the tool broke".
EXIT_PASS = 0
EXIT_FAILED = 1  # a gate, monitor check or self-test failed
EXIT_BAD_INPUT = 2  # bad input or usage (argparse uses 2 as well)
EXIT_INTERNAL_ERROR = 70  # EX_SOFTWARE: an unexpected error, a bug of specaudit
EXIT_INTERRUPTED = 130


def _internal_error(command: str, err: BaseException) -> int:
    """One line for an unexpected error; the traceback only when SPECAUDIT_DEBUG asks for it."""
    import os
    import traceback

    if os.environ.get("SPECAUDIT_DEBUG"):
        traceback.print_exc()
    what = " ".join(str(err).split())[:300]
    print(
        f"specaudit: internal error: `specaudit {command}` failed with {type(err).__name__}: {what}; this is a bug of "
        "specaudit, please report it with the command and the traceback that SPECAUDIT_DEBUG=1 prints",
        file=sys.stderr,
    )
    return EXIT_INTERNAL_ERROR


def main(argv: list[str] | None = None) -> int:
    register_typed({})  # no flag of an earlier command in this process is named again
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse itself exits 2 on bad flags
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what the run records as its command
    warnings.formatwarning = _one_line_warning  # users get sentences, not source lines
    try:
        return int(args.func(args) or 0)
    except InputError as err:
        print(f"specaudit: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # output piped into `head`: not an error of ours
        sys.stderr.close()
        return EXIT_PASS
    except KeyboardInterrupt:
        print("specaudit: interrupted; completed records are kept, re-run to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as err:
        if err.filename is None:
            return _internal_error(args.command, err)
        # The system refused a file the user named or holds (full disk, read-only folder): their
        # environment, not a bug, and the stage writes atomically, so nothing is half-written.
        print(f"specaudit: error: cannot use {err.filename}: {err.strerror or err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as err:  # noqa: BLE001 (anything else is our bug: exit 70, never 1, the code of a failed gate)
        return _internal_error(args.command, err)
