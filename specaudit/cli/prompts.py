"""`specaudit prompts`: list, show, validate, describe and checksum prompt sets."""

from __future__ import annotations

import argparse
import sys

from specaudit._validation import seed_int


# ----------------------------------------------------------------------- prompts
def add_prompts(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prompts", help="list, show, validate and describe prompt sets")
    p.set_defaults(func=cmd_prompts)
    actions = p.add_subparsers(dest="prompts_command", required=True)
    actions.add_parser("list", help="named sets in prompt_sets/ with version and groups")
    show = actions.add_parser("show", help="manifest summary and a few example rows")
    show.add_argument("name", help="set name or folder with manifest.yaml")
    show.add_argument("--rows", type=int, default=2, help="example rows per dimension (default 2)")
    validate = actions.add_parser("validate", help="check a set or file; exit 2 on errors, warnings printed")
    validate.add_argument("source", help="set name, folder, JSONL/CSV/Parquet file or HF dataset id")
    stats = actions.add_parser("stats", help="prompts per group and length distribution")
    stats.add_argument("source", help="set name, folder, JSONL/CSV/Parquet file or HF dataset id")
    stats.add_argument("--tokenizer", default="default", help="'default' (embedded model), 'none' (count words) or a tokenizer path/HF id")
    stats.add_argument("--dimensions", help="comma-separated dimensions to keep")
    stats.add_argument("--per-group", type=int, help="stratified sample of N prompts per group, as a run would use")
    stats.add_argument("--seed", type=seed_int, default=0, help="sampling seed (default 0)")
    stats.add_argument("--intersect", help="comma-separated dimensions to cross, e.g. domain,dialect")
    for q in (validate, stats):
        q.add_argument("--column-map", help="e.g. text=question,id=qid,group:domain=category")
        q.add_argument("--split", default="train", help="split of an HF or saved dataset (default train)")
    checksum = actions.add_parser("checksum", help="recompute data-file checksums of a set")
    checksum.add_argument("name", help="set name or folder with manifest.yaml")
    checksum.add_argument("--write", action="store_true", help="store them in manifest.yaml")


def cmd_prompts(args: argparse.Namespace) -> int:
    from specaudit import prompts

    if args.prompts_command == "list":
        print(prompts.format_prompt_sets())
    elif args.prompts_command == "show":
        print(prompts.describe_prompt_set(args.name, examples=args.rows))
    elif args.prompts_command == "validate":
        report = prompts.validate_prompt_set(args.source, column_map=args.column_map, split=args.split)
        warnings_text, errors_text = prompts.format_validation(report)
        if warnings_text:
            print(warnings_text)
        if errors_text:
            print(errors_text, file=sys.stderr)
        summary = f"{args.source}: {report.n_prompts} valid prompts, {len(report.errors)} error(s), {len(report.warnings)} warning(s)"
        print(summary, file=sys.stderr if report.errors else sys.stdout)
        return 0 if report.ok else 2
    elif args.prompts_command == "stats":
        prompt_set = prompts.load_prompts(
            args.source,
            column_map=args.column_map,
            split=args.split,
            dimensions=args.dimensions,
            per_group=args.per_group,
            seed=args.seed,
            intersect=args.intersect,
        )
        table = prompts.prompt_set_stats(prompt_set, tokenizer=prompts.resolve_tokenizer(args.tokenizer))
        print(f"{prompt_set.name} (version {prompt_set.version}), {len(prompt_set)} prompts, checksum {prompt_set.checksum[:12]}")
        print(prompts.format_stats(table, prompt_set.min_group_size))
    elif args.prompts_command == "checksum":
        entries = prompts.update_checksums(args.name, write=args.write)
        print(prompts.format_checksums(entries, written=args.write))
    return 0
