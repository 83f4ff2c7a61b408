"""`specaudit llama-server build`: build llama.cpp's llama-server and llama-speculative once (for
`--engines llama-server` and `--engines llama-speculative`); the registry names `add_commands`, and
the command line adds it (argparse only here, the build itself is engines.llama_build)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "llama-server", help="llama.cpp's llama-server and llama-speculative (--engines llama-server, llama-speculative): build them once"
    )
    commands = p.add_subparsers(dest="llama_server_command", required=True)
    build = commands.add_parser(
        "build", help="build llama-server and llama-speculative from the llama.cpp the llama-cpp-python sdist vendors, cached"
    )
    build.add_argument("--version", help="llama-cpp-python version whose sources to build (default: the installed one)")
    build.add_argument("--sdist", type=Path, help="an already downloaded llama-cpp-python sdist (.tar.gz); default: pip downloads it")
    build.add_argument("--jobs", type=int, default=2, help="parallel compile jobs (default 2)")
    build.set_defaults(func=cmd_build)


def cmd_build(args: argparse.Namespace) -> int:
    from specaudit.engines.llama_build import build
    from specaudit.errors import InputError

    if args.jobs < 1:
        raise InputError(f"--jobs must be an integer >= 1, got {args.jobs}")
    print(build(args.version, args.sdist, args.jobs))
    return 0
