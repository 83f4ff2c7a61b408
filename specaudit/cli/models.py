"""`specaudit models`: the named models (GGUF files fetched with pip) and fetching them ahead of a run."""

from __future__ import annotations

import argparse


def add_models(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The `models` group; returns its sub-commands, where engines add theirs (the registry's `commands`)."""
    p = sub.add_parser("models", help="list the named models, or fetch them into the cache ahead of a run")
    p.set_defaults(func=cmd_models)
    actions = p.add_subparsers(dest="models_command", required=True)
    actions.add_parser("list", help="named models and pairs, their sizes and where they are cached")
    fetch = actions.add_parser("fetch", help="download, assemble and verify named models (a pair name fetches both)")
    fetch.add_argument("names", nargs="+", metavar="NAME", help="e.g. qwen2.5-coder (the pair) or qwen2.5-coder-0.5b")
    fetch.add_argument("--quiet", action="store_true", help="no progress bars")
    fetch.add_argument(
        "--for-torch",
        action="store_true",
        help="also convert each model once into the HF-format cache the torch engines load (302 s for qwen2.5-coder, measured on a 2-core CPU; a run does it on first use otherwise)",
    )
    return actions


def cmd_models(args: argparse.Namespace) -> int:
    from specaudit.models._named import describe_named, models_to_fetch, resolve

    if args.models_command == "list":
        print(describe_named())
        return 0
    for model in models_to_fetch(args.names):
        was_cached = model.is_cached()
        path = resolve(model.name, progress=not args.quiet)
        print(f"{model.name}: {path} ({model.size / 1e9:.2f} GB, sha256 {model.sha256[:12]}…{' already fetched' if was_cached else ''})")
        if args.for_torch:
            from specaudit.models._loading import named_hf_folder

            print(f"{model.name}: HF-format cache {named_hf_folder(model.name)}")
    return 0
