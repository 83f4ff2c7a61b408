"""`specaudit models export-openvino`: named models exported to OpenVINO IR (for `--engines openvino`);
the registry names `add_commands`, and the command line adds it under `models` (argparse only here,
the export itself is engines.openvino.export)."""

from __future__ import annotations

import argparse


def add_commands(models: argparse._SubParsersAction) -> None:
    export = models.add_parser(
        "export-openvino",
        help="export named models to OpenVINO IR with optimum-intel, for --engines openvino (OpenVINO cannot read their GGUF files)",
    )
    export.add_argument("names", nargs="+", metavar="NAME", help="e.g. qwen2.5-coder (the pair) or qwen2.5-coder-0.5b")
    export.add_argument(
        "--optimum-cli",
        metavar="PATH",
        help="optimum-intel's optimum-cli (default: the one on PATH); docs/openvino.md says how to install it",
    )
    export.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads the export may use (default: all)")
    export.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from specaudit.engines.openvino.export import main_export

    return main_export(args.names, args.optimum_cli, args.threads)
