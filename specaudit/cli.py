"""Command line: one thin function per subcommand. Parsing only; the work lives in the package."""

from __future__ import annotations

import argparse
import sys

from specaudit.errors import InputError


# --------------------------------------------------------------------------- run
def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="decode a prompt set with each engine and write records.jsonl")
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    raise NotImplementedError


# ----------------------------------------------------------------------- prompts
def _add_prompts(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prompts", help="list, show, validate and describe prompt sets")
    p.set_defaults(func=cmd_prompts)


def cmd_prompts(args: argparse.Namespace) -> int:
    raise NotImplementedError


# -------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specaudit",
        description="Audit speculative decoding for correctness and fairness.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_prompts(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse itself exits 2 on bad flags
    try:
        return int(args.func(args) or 0)
    except InputError as err:
        print(f"specaudit: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specaudit: interrupted; completed records are kept, re-run to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
