"""Command line: one thin function per subcommand. Parsing only; the work lives in the package."""

from __future__ import annotations

import argparse
import sys
import warnings

from specaudit.errors import InputError


# --------------------------------------------------------------------------- run
def _add_decoding_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `run` and `audit`; defaults live in RunConfig, so unset flags stay None."""
    g = p.add_argument_group("models")
    g.add_argument("--target", help="HF hub id, local folder, .gguf file, or 'default' (embedded SmolLM2-135M-Instruct)")
    g.add_argument("--draft", help="int8 | early-exit:N | ngram | HF hub id | folder | .gguf file (default int8)")
    g.add_argument("--device", help="auto | cpu | cuda[:N] (default auto)")
    g.add_argument("--dtype", help="auto | float32 | bfloat16 | float16 (auto: bf16 on CUDA, float32 on CPU)")
    g = p.add_argument_group("decoding")
    g.add_argument("--engines", help="comma list of vanilla, speculative, hf-assisted (default vanilla,speculative)")
    g.add_argument("--k", type=int, help="draft tokens per verification step (default 4)")
    g.add_argument("--temperature", type=float, help="0 = greedy (default 1.0)")
    g.add_argument("--top-k", type=int, help="0 = off")
    g.add_argument("--top-p", type=float, help="1.0 = off")
    g.add_argument("--samples", type=int, help="samples per prompt and engine (default 1)")
    g.add_argument("--max-new-tokens", type=int, help="default 48")
    g.add_argument("--seed", type=int, help="run seed (default 0)")
    g.add_argument("--timing-repeats", type=int, help="extra interleaved runs per prompt used only for latency")
    g.add_argument("--warmup", type=int, help="warm-up rounds before timing (default 1)")
    g.add_argument("--verify", help="module:function of your own rejection step, run inside the speculative engine")
    g.add_argument("--no-chat-template", dest="chat_template", action="store_const", const=False,
                   help="feed prompt text as is, not through the tokenizer's chat template")
    g = p.add_argument_group("prompts")
    g.add_argument("--prompts", help="prompt set name (core), folder, JSONL/CSV/Parquet file or HF dataset id")
    g.add_argument("--column-map", help="for files and HF datasets: text=COL,id=COL,group:DIM=COL")
    g.add_argument("--per-group", type=int, help="stratified sample of N prompts per group (seeded)")
    g.add_argument("--dimensions", help="comma list of prompt dimensions to keep, e.g. dialect,language")
    p.add_argument("--config", help="YAML file of these options (flags given on the command line win)")


def _run_config(args: argparse.Namespace):
    """RunConfig from a config file overlaid with the flags actually given."""
    from dataclasses import fields

    from specaudit.config import RunConfig, load_config_file, run_config_from

    options = load_config_file(args.config) if getattr(args, "config", None) else {}
    source = f"config file {args.config}" if getattr(args, "config", None) else "options"
    for f in fields(RunConfig):
        value = getattr(args, f.name, None)
        if value is not None:
            options[f.name] = value
    options = {k: v for k, v in options.items() if k not in ("out",)}
    return run_config_from(options, source)


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="decode a prompt set with each engine and write records.jsonl")
    _add_decoding_options(p)
    p.add_argument("--out", required=True, help="run folder (created; re-running the same command resumes)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    from specaudit.runner import run

    summary = run(_run_config(args), args.out, progress=not args.quiet, command=" ".join(["specaudit", *sys.argv[1:]]))
    print(f"{summary.out_dir}/records.jsonl: {summary.records} records ({summary.written} new, {summary.skipped} resumed) in {summary.seconds:.1f} s")
    return 0


# ----------------------------------------------------------------------- analyze
def _add_analysis_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("analysis")
    g.add_argument("--alpha", type=float, default=0.05, help="family-wise error rate of the equivalence battery (default 0.05)")
    g.add_argument("--delta", type=float, default=0.05, help="equivalence margin on total variation (default 0.05)")
    g.add_argument("--analyze-dimensions", dest="analyze_dimensions", help="prompt attributes to analyse (default: all in the run)")
    g.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples of prompts (default 1000)")
    g.add_argument("--band", default="0.8,1.25", help="tolerance band on the ratio to the reference group (default 0.8,1.25)")
    g.add_argument("--fallback-threshold", type=float, default=0.5, help="acceptance below which the fallback simulation routes to vanilla")
    g.add_argument("--no-equivalence", dest="equivalence", action="store_false", help="skip the equivalence tests (no model loading)")


def _analysis_kwargs(args: argparse.Namespace) -> dict:
    try:
        low, high = (float(x) for x in args.band.split(","))
    except ValueError:
        raise InputError(f"--band {args.band!r}: write two numbers low,high such as 0.8,1.25") from None
    dims = [d.strip() for d in args.analyze_dimensions.split(",")] if args.analyze_dimensions else None
    return dict(alpha=args.alpha, delta=args.delta, dimensions=dims, n_boot=args.n_boot, tolerance=(low, high),
                fallback_threshold=args.fallback_threshold, equivalence=args.equivalence)


def _add_analyze(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", help="test equivalence and measure disparity: RUN_DIR/records.jsonl -> RUN_DIR/snapshot.json")
    p.add_argument("run_dir")
    p.add_argument("--device", help="device for scoring (default: the run's)")
    _add_analysis_options(p)
    p.set_defaults(func=cmd_analyze)


def cmd_analyze(args: argparse.Namespace) -> int:
    from specaudit.analysis import analyze

    snapshot = analyze(args.run_dir, device=args.device, **_analysis_kwargs(args))
    print(f"{args.run_dir}/snapshot.json: equivalence {snapshot['equivalence']['status']}, "
          f"{sum(len(v.get('by_group', {})) for v in snapshot['groups'].values())} groups in {len(snapshot['groups'])} dimension(s)")
    return 0


# ----------------------------------------------------------------------- prompts
def _add_prompts(sub: argparse._SubParsersAction) -> None:
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
    stats.add_argument("--tokenizer", default="default",
                       help="'default' (embedded model), 'none' (count words) or a tokenizer path/HF id")
    stats.add_argument("--dimensions", help="comma-separated dimensions to keep")
    stats.add_argument("--per-group", type=int, help="stratified sample of N prompts per group, as a run would use")
    stats.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
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
        prompt_set = prompts.load_prompts(args.source, column_map=args.column_map, split=args.split,
                                          dimensions=args.dimensions, per_group=args.per_group, seed=args.seed,
                                          intersect=args.intersect)
        table = prompts.prompt_set_stats(prompt_set, tokenizer=prompts.resolve_tokenizer(args.tokenizer))
        print(f"{prompt_set.name} (version {prompt_set.version}), {len(prompt_set)} prompts, checksum {prompt_set.checksum[:12]}")
        print(prompts.format_stats(table, prompt_set.min_group_size))
    elif args.prompts_command == "checksum":
        entries = prompts.update_checksums(args.name, write=args.write)
        print(prompts.format_checksums(entries, written=args.write))
    return 0


# -------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specaudit",
        description="Audit speculative decoding for correctness and fairness.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_analyze(sub)
    _add_prompts(sub)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> str:
    return f"specaudit: warning: {message}\n"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse itself exits 2 on bad flags
    warnings.formatwarning = _one_line_warning  # users get sentences, not source lines
    try:
        return int(args.func(args) or 0)
    except InputError as err:
        print(f"specaudit: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head`: not an error of ours
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("specaudit: interrupted; completed records are kept, re-run to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
