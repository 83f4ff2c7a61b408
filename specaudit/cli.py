"""Command line: one thin function per subcommand. Parsing only; the work lives in the package."""

from __future__ import annotations

import argparse
import sys
import warnings

from specaudit.contracts import DEFAULT_BAND
from specaudit.errors import InputError


# --------------------------------------------------------------------------- run
def _add_decoding_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `run` and `audit`; defaults live in RunConfig, so unset flags stay None."""
    g = p.add_argument_group("models")
    g.add_argument("--target", help="HF hub id, local folder, .gguf file, or 'default' (embedded SmolLM2-135M-Instruct)")
    g.add_argument("--draft", help="int8 | early-exit:N | ngram | HF hub id | folder | .gguf file (default int8)")
    g.add_argument("--device", help="auto | cpu | cuda[:N] (default auto)")
    g.add_argument("--dtype", help="auto | float32 | bfloat16 | float16 (auto: bf16 on CUDA, float32 on CPU)")
    g.add_argument("--threads", type=int, help="CPU threads for torch (default 1: batch-1 decoding gains little from more)")
    g = p.add_argument_group("decoding")
    g.add_argument(
        "--engines",
        help="comma list of vanilla, speculative, hf-assisted (default vanilla,speculative); "
        "or a backend alone: endpoint (live servers, config `endpoint:`), vllm (GPU) or llama-cpp (GGUF on CPU)",
    )
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
    g.add_argument(
        "--draft-noise",
        help="dimension=group:sigma: add N(0, sigma^2) noise to the draft's logits on that group's "
        "prompts, planting a known disparity to check the audit finds it",
    )
    g.add_argument(
        "--no-chat-template",
        dest="chat_template",
        action="store_const",
        const=False,
        help="feed prompt text as is, not through the tokenizer's chat template",
    )
    g = p.add_argument_group("prompts")
    g.add_argument("--prompts", help="prompt set name (core), folder, JSONL/CSV/Parquet file or HF dataset id")
    g.add_argument("--column-map", help="for files and HF datasets: text=COL,id=COL,group:DIM=COL")
    g.add_argument("--per-group", type=int, help="stratified sample of N prompts per group (parallel dimensions: N pairs)")
    g.add_argument("--sample-seed", type=int, help="seed of the --per-group sample (default 0; independent of --seed)")
    g.add_argument("--dimensions", help="comma list of prompt dimensions to keep, e.g. dialect,language")
    p.add_argument("--config", help="YAML file of these options (flags given on the command line win)")


def _flag_options(args: argparse.Namespace) -> dict:
    """The RunConfig options actually given as flags (unset flags are None and fall through)."""
    from specaudit.config import RUN_OPTIONS

    return {name: getattr(args, name) for name in RUN_OPTIONS if getattr(args, name, None) is not None}


def _config_file_sections(args: argparse.Namespace) -> tuple[dict, dict, dict, str]:
    """(run options, analysis section, gate section, source name) of --config, empty without one."""
    from specaudit.audit import split_audit_config
    from specaudit.config import load_config_file

    if not getattr(args, "config", None):
        return {}, {}, {}, "options"
    source = f"config file {args.config}"
    return (*split_audit_config(load_config_file(args.config), source), source)


def _run_config(args: argparse.Namespace):
    from specaudit.config import run_config_from

    run_options, analysis_options, gate_options, source = _config_file_sections(args)
    run_options.pop("out", None)
    # `run` uses neither section, but a typo in one must not wait for `analyze` or `gate` to surface
    _analysis_kwargs(argparse.Namespace(), analysis_options, source)
    if gate_options:
        from specaudit.gate import load_thresholds

        try:
            load_thresholds({"gate": gate_options})
        except InputError as err:
            raise InputError(f"{source}: {err}") from None
    return run_config_from({**run_options, **_flag_options(args)}, source)


def _add_executor_options(p: argparse.ArgumentParser) -> None:
    """Where the plan runs; RunConfig fields, so a --config file may set them too."""
    g = p.add_argument_group("execution")
    g.add_argument(
        "--executor",
        choices=("local", "ray"),
        help="local (this process, default) or ray (one actor per GPU or CPU slot; needs specaudit[ray])",
    )
    g.add_argument("--workers", type=int, help="Ray actors (default: one per GPU, else one per --threads CPUs)")
    g.add_argument("--ray-address", help="a running Ray cluster, e.g. auto or ray://head:10001 (default: start Ray here)")


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="decode a prompt set with each engine and write records.jsonl")
    _add_decoding_options(p)
    _add_executor_options(p)
    p.add_argument("--out", required=True, help="run folder (created; re-running the same command resumes)")
    p.add_argument("--shard", help="i/N: run only shard i of N (stable by prompt id); combine with `specaudit merge`")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    from specaudit.preflight import check_model_sources

    cfg = _run_config(args)
    check_model_sources(cfg)  # before the runner and prompt loading: an unreachable model fails in seconds

    from specaudit.runner import run
    from specaudit.shards import parse_shard

    shard = parse_shard(args.shard) if args.shard else None
    summary = run(cfg, args.out, progress=not args.quiet, command=" ".join(["specaudit", *sys.argv[1:]]), shard=shard)
    print(
        f"{summary.out_dir}/records.jsonl: {summary.records} records ({summary.written} new, {summary.skipped} resumed) in {summary.seconds:.1f} s"
    )
    return 0


def _add_merge(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="combine shard run folders into one (settings must agree)")
    p.add_argument("--out", required=True, help="new run folder for the merged records")
    p.add_argument("run_dirs", nargs="+")
    p.set_defaults(func=cmd_merge)


def cmd_merge(args: argparse.Namespace) -> int:
    from specaudit.shards import merge_runs

    count = merge_runs(args.out, args.run_dirs)
    print(f"{args.out}/records.jsonl: {count} records from {len(args.run_dirs)} shard(s)")
    return 0


# ----------------------------------------------------------------------- analyze
def _add_analysis_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("analysis")
    g.add_argument("--alpha", type=float, help="family-wise error rate of the equivalence battery (default 0.05)")
    g.add_argument("--delta", type=float, help="equivalence margin on total variation (default 0.05)")
    g.add_argument("--analyze-dimensions", dest="analyze_dimensions", help="prompt attributes to analyse (default: all in the run)")
    g.add_argument("--n-boot", type=int, help="bootstrap resamples of prompts (default 1000)")
    g.add_argument("--band", help="tolerance band on the ratio to the reference group (default {},{})".format(*DEFAULT_BAND))
    g.add_argument(
        "--fallback-threshold", type=float, help="acceptance below which the fallback simulation routes to vanilla (default 0.5)"
    )
    g.add_argument(
        "--no-equivalence", dest="equivalence", action="store_const", const=False, help="skip the equivalence tests (no model loading)"
    )


def _analysis_kwargs(args: argparse.Namespace, base: dict | None = None, source: str = "options") -> dict:
    """analyze() keyword arguments: a config file's `analysis:` section overlaid with the flags given,
    each checked by AnalysisSettings and named as the user wrote it (a config key, then a flag)."""
    from specaudit.config import AnalysisSettings

    try:
        section = AnalysisSettings.parse(dict(base or {}), name=str)
    except InputError as err:
        raise InputError(f"{source}, `analysis:` section: {err}") from None
    flags = {name: getattr(args, name, None) for name in ("alpha", "delta", "n_boot", "fallback_threshold", "equivalence", "band")}
    flags["dimensions"] = getattr(args, "analyze_dimensions", None)
    flags = {("tolerance" if name == "band" else name): value for name, value in flags.items() if value is not None}
    spelled = {"dimensions": "--analyze-dimensions"}
    settings = AnalysisSettings.parse(
        {**section.model_dump(), **flags}, name=lambda field: spelled.get(field, f"--{field.replace('_', '-')}")
    )
    return settings.model_dump()


def _add_analyze(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", help="test equivalence and measure disparity: RUN_DIR/records.jsonl -> RUN_DIR/snapshot.json")
    p.add_argument("run_dir")
    p.add_argument("--device", help="device for scoring (default: the run's)")
    _add_analysis_options(p)
    p.set_defaults(func=cmd_analyze)


def cmd_analyze(args: argparse.Namespace) -> int:
    from specaudit.analysis import analyze

    snapshot = analyze(args.run_dir, device=args.device, **_analysis_kwargs(args))
    print(
        f"{args.run_dir}/snapshot.json: equivalence {snapshot['equivalence']['status']}, "
        f"{sum(len(v.get('by_group', {})) for v in snapshot['groups'].values())} groups in {len(snapshot['groups'])} dimension(s)"
    )
    return 0


# ------------------------------------------------------------------------- audit
def _add_audit_options(p: argparse.ArgumentParser) -> None:
    """What `audit` and `monitor run` share: they run the same audit."""
    _add_decoding_options(p)
    _add_executor_options(p)
    _add_analysis_options(p)
    p.add_argument("--quick", action="store_true", help="a smaller budget (1 prompt per group, 32 tokens: about 3 minutes on a 2-core CPU)")
    p.add_argument("--out", help="output folder (default reports/<run-id>)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_audit(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit", help="run -> analyze -> report -> gate in one command (default: the embedded pair on core)")
    _add_audit_options(p)
    p.set_defaults(func=cmd_audit)


def _run_audit(args: argparse.Namespace):
    from specaudit.audit import DEFAULT_BUDGET, QUICK_BUDGET, audit, default_run_id
    from specaudit.config import run_config_from

    run_options, analysis_options, gate_options, source = _config_file_sections(args)
    out = args.out or run_options.pop("out", None)
    budget = QUICK_BUDGET if args.quick else DEFAULT_BUDGET
    cfg = run_config_from({**budget, **run_options, **_flag_options(args)}, source)
    from specaudit.preflight import check_model_sources

    check_model_sources(cfg)
    out = out or f"reports/{default_run_id(cfg)}"
    result = audit(
        cfg,
        out,
        analysis=_analysis_kwargs(args, analysis_options, source),
        gate=gate_options,
        progress=not args.quiet,
        command=" ".join(["specaudit", *sys.argv[1:]]),
    )
    print(f"report: {result.files['html']}")
    print(
        f"equivalence: {result.snapshot['equivalence'].get('status', 'not run').upper()}  gate: {result.gate_status.upper()}"
        f"  (snapshot: {result.out_dir}/snapshot.json)"
    )
    return result


def cmd_audit(args: argparse.Namespace) -> int:
    return _run_audit(args).exit_code


# ---------------------------------------------------------------------- selftest
def _add_selftest(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("selftest", help="the auditor audits itself: false alarms of the correct sampler, detection of mutants")
    p.add_argument("--quick", action="store_true", help="fewer seeds (unit 20, end-to-end 3)")
    p.add_argument("--seeds", type=int, help="seeds per sampler for the unit audit (default 200)")
    p.add_argument("--e2e-seeds", type=int, help="seeds per sampler for the end-to-end audit (default 20)")
    p.add_argument("--target", default="tiny", help="end-to-end pair: tiny (random 2-layer models, default) or a target such as default")
    p.add_argument("--draft", default="int8", help="draft for a non-tiny end-to-end target (default int8)")
    p.add_argument("--samplers", help="comma list of samplers (default: correct and every mutant)")
    p.add_argument("--skip-e2e", action="store_true", help="only the unit audit")
    p.set_defaults(func=cmd_selftest)


def cmd_selftest(args: argparse.Namespace) -> int:
    import tempfile

    import pandas as pd

    from specaudit.selftest import MUTANTS
    from specaudit.selftest.end_to_end import end_to_end_selftest
    from specaudit.selftest.harness import unit_selftest

    for flag, value in (("--seeds", args.seeds), ("--e2e-seeds", args.e2e_seeds)):
        if value is not None and value < 1:
            raise InputError(f"{flag} must be an integer >= 1, got {value}")
    samplers = [s.strip() for s in args.samplers.split(",") if s.strip()] if args.samplers is not None else list(MUTANTS)
    if not samplers:
        raise InputError(f"--samplers names no sampler; give a comma list from {', '.join(MUTANTS)}, or leave it out for all")
    unknown = [s for s in samplers if s not in MUTANTS]
    if unknown:
        raise InputError(f"unknown sampler(s) {', '.join(unknown)}; choose from {', '.join(MUTANTS)}")
    pd.set_option("display.width", 200)
    unit_seeds = range(args.seeds) if args.seeds is not None else None
    unit = unit_selftest(seeds=unit_seeds, quick=args.quick, samplers=samplers)
    print("unit audit (audit_sampler on (p, q) families):")
    print(unit.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    e2e = None
    if not args.skip_e2e:
        from specaudit.models import load_pair, save_tiny_pair
        from specaudit.prompts import load_prompts

        with tempfile.TemporaryDirectory() as folder:
            if args.target == "tiny":
                target, draft = save_tiny_pair(folder)
                pair = load_pair(str(target), str(draft), device="cpu")
            else:
                pair = load_pair(args.target, args.draft)
            prompts = load_prompts("core", dimensions=["domain"], per_group=1, seed=0)
            seeds = range(args.e2e_seeds if args.e2e_seeds is not None else (3 if args.quick else 20))
            e2e = end_to_end_selftest(pair, prompts, samplers=samplers, seeds=seeds)
        print(f"\nend to end (mutant inside the speculative engine, full analysis; target {args.target}):")
        print(e2e.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    # The exit code covers every part that ran: a row of either table that missed its target fails it.
    missed = [
        f"{part} {name}"
        for part, table in (("unit", unit), ("end-to-end", e2e))
        if table is not None
        for name in table.loc[~table["ok"].astype(bool), "sampler"]
    ]
    if missed:
        print(f"\nselftest failed: {', '.join(missed)} missed the target", file=sys.stderr)
    return 1 if missed else 0


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
    stats.add_argument("--tokenizer", default="default", help="'default' (embedded model), 'none' (count words) or a tokenizer path/HF id")
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


# ----------------------------------------------------------------------- monitor
def _add_monitor(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "monitor",
        aliases=["history"],
        help="history store of snapshots, drift against a baseline, alerts, trend report",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "a nightly job (cron, systemd timer, CI schedule; see specaudit/monitor/scheduling.md):\n"
            "  specaudit monitor check runs/today --store sqlite:///history.db --environment prod \\\n"
            "      --alert-file alerts.jsonl --metrics-file /var/lib/node_exporter/textfile/specaudit.prom\n"
            "exit codes: 0 no FAIL, 1 a check FAILed, 2 bad input or unusable store"
        ),
    )
    p.set_defaults(func=cmd_monitor)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store", help="sqlite:///path.db (default $SPECAUDIT_STORE, else sqlite:///specaudit-history.db) or postgresql://user@host/db"
    )
    common.add_argument(
        "--environment", help="environment tag (default $SPECAUDIT_ENVIRONMENT): stored with `add`, filters the other actions"
    )
    actions = p.add_subparsers(dest="monitor_command", required=True)
    add = actions.add_parser("add", parents=[common], help="store a snapshot (snapshot.json or its run folder)")
    add.add_argument("snapshot")
    checking = argparse.ArgumentParser(add_help=False)  # what `check` and `run` share
    checking.add_argument("--baseline", default="auto", help="auto (pinned run, else rolling:5) | pinned | rolling:N | a run id or name")
    checking.add_argument(
        "--metrics", default="acceptance_rate,speedup", help="comma list of metrics to compare (default acceptance_rate,speedup)"
    )
    checking.add_argument(
        "--min-change", type=float, default=0.10, help="practical threshold: relative worsening that FAILs (default 0.10)"
    )
    checking.add_argument("--no-cusum", dest="cusum", action="store_false", help="skip the CUSUM slow-drift check over the history")
    checking.add_argument("--cusum-h", type=float, help="CUSUM threshold (default ln(series / alpha) / (2k), k = 0.5)")
    checking.add_argument("--format", choices=("text", "json"), default="text")
    checking.add_argument("--verbose", action="store_true", help="text: print PASS checks too")
    checking.add_argument("--alert-file", help="append non-PASS checks as JSON lines to this file")
    checking.add_argument("--metrics-file", help="write Prometheus textfile-collector gauges of the run and its checks here")
    checking.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="extra tag stored with the snapshot (repeatable)")
    add.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="extra tag stored with the snapshot (repeatable)")
    check = actions.add_parser(
        "check", aliases=["drift"], parents=[common, checking], help="compare a run with its baseline; alerts one per line; exit 1 on FAIL"
    )
    check.add_argument("snapshot", nargs="?", help="store this snapshot first and check it (default: the latest stored run)")
    check.add_argument("--snapshot", dest="snapshot_option", metavar="PATH", help="the same as the positional SNAPSHOT")
    check.add_argument("--run", default="latest", help="stored run to check: id, name or 'latest' (default)")
    check.add_argument("--alpha", type=float, default=0.05, help="family-wise error rate over groups x metrics, Holm (default 0.05)")
    run = actions.add_parser(
        "run", parents=[common, checking], help="run an audit (the flags and config of `specaudit audit`), store its snapshot and check it"
    )
    _add_audit_options(run)  # its --alpha serves the audit's tests and the drift checks alike
    report = actions.add_parser("report", parents=[common], help="trend report: OUT/trend.html (self-contained) and OUT/trend.csv")
    report.add_argument("--out", default="reports/trend", help="output folder (default reports/trend)")
    report.add_argument("--metrics", default="acceptance_rate,speedup", help="comma list of metrics to chart")
    report.add_argument("--dimensions", help="comma list of dimensions to chart (default all)")
    report.add_argument("--last", type=int, default=50, help="latest N runs (default 50)")
    report.add_argument("--title", help="page title")
    export = actions.add_parser("export", parents=[common], help="Prometheus text-format gauges of a stored run")
    export.add_argument("run", nargs="?", default="latest")
    export.add_argument("--metrics-file", help="write atomically here (for node_exporter's textfile collector); default stdout")
    listing = actions.add_parser("list", parents=[common], help="stored runs, newest last")
    listing.add_argument("--limit", type=int, default=20, help="latest N runs (default 20; 0 = all)")
    listing.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="only runs with this tag (repeatable)")
    listing.add_argument("--format", choices=("text", "json"), default="text")
    show = actions.add_parser("show", parents=[common], help="one stored run (--format json: the stored snapshot)")
    show.add_argument("run")
    show.add_argument("--format", choices=("text", "json"), default="text")
    baseline = actions.add_parser("baseline", parents=[common], help="pin, show or clear the baseline run of an environment")
    baseline.add_argument("action", choices=("set", "show", "clear"))
    baseline.add_argument("run", nargs="?", help="for set: run id or name")


def cmd_monitor(args: argparse.Namespace) -> int:
    import contextlib
    import json
    import os

    from specaudit import monitor
    from specaudit.monitor._check import alert_counts, describe_run, history_table
    from specaudit.monitor._store import parse_tags

    action = {"drift": "check"}.get(args.monitor_command, args.monitor_command)
    environment = args.environment if args.environment is not None else os.environ.get("SPECAUDIT_ENVIRONMENT")
    if action == "check":
        args.snapshot = args.snapshot or args.snapshot_option
    elif action == "run":
        # Open the store before minutes of decoding: a foreign or damaged database fails first.
        monitor.open_store(args.store, create=True).close()
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the check (JSON with --format json)
            args.snapshot = str(_run_audit(args).out_dir)
        args.run, args.alpha = "latest", args.alpha if args.alpha is not None else 0.05
        action = "check"
    creating = action == "add" or (action == "check" and args.snapshot)
    with monitor.open_store(args.store, create=bool(creating)) as store:
        if action == "add":
            added = store.add(args.snapshot, environment=environment or "", tags=parse_tags(args.tag))
            verb = "stored" if added.added else "already stored (same snapshot)"
            print(f"{verb}: run {added.run.label} created {added.run.created}, environment {added.run.environment or '-'}, in {store.url}")
        elif action == "check":
            run = args.run
            if args.snapshot:
                run = store.add(args.snapshot, environment=environment or "", tags=parse_tags(args.tag)).run.id
            metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
            result = monitor.check(
                store,
                run,
                baseline=args.baseline,
                environment=environment,
                metrics=metrics,
                alpha=args.alpha,
                min_change=args.min_change,
                cusum=args.cusum,
                cusum_h=args.cusum_h,
            )
            print(json.dumps(result.to_dict(), indent=2) if args.format == "json" else result.format_text(verbose=args.verbose))
            checked = store.get(result.run_id)
            if args.alert_file:
                monitor.append_alerts(args.alert_file, monitor.alert_lines(result, environment=checked.environment))
            if args.metrics_file:
                monitor.write_atomic(args.metrics_file, monitor.metrics_text(store, checked, result=result))
            return result.exit_code
        elif action == "report":
            metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
            dims = [d.strip() for d in args.dimensions.split(",")] if args.dimensions else None
            report = monitor.write_trend_report(
                store, args.out, environment=environment, last=args.last or None, metrics=metrics, dimensions=dims, title=args.title
            )
            print(f"{report.html_path} and {report.csv_path}: {report.n_runs} run(s), {report.n_charts} chart(s)")
        elif action == "export":
            text = monitor.metrics_text(store, args.run, environment=environment)
            if args.metrics_file:
                print(f"{monitor.write_atomic(args.metrics_file, text)}: {text.count(chr(10))} lines")
            else:
                sys.stdout.write(text)
        elif action == "list":
            if args.limit < 0:
                raise InputError(f"--limit must be >= 0 (0 shows all runs), got {args.limit}")
            runs = store.runs(environment=environment, tags=parse_tags(args.tag), limit=args.limit or None)
            if args.format == "json":
                print(json.dumps([r.to_dict() for r in runs], indent=2))
            else:
                print(history_table(runs, pins=store.baselines(), alerts=alert_counts(store, runs)) if runs else f"no runs in {store.url}")
                total = (
                    len(store.runs(environment=environment, tags=parse_tags(args.tag)))
                    if args.limit and len(runs) == args.limit
                    else len(runs)
                )
                if total > len(runs):
                    print(f"{len(runs)} of {total} shown (--limit 0 for all)")
        elif action == "show":
            run = store.get(args.run, environment=environment)
            print(json.dumps(store.snapshot(run), indent=2) if args.format == "json" else describe_run(store, run))
        elif action == "baseline":
            env = environment or ""
            if args.action == "set":
                if not args.run:
                    raise InputError("`monitor baseline set` needs a RUN (id or name; `specaudit monitor list` shows them)")
                run = store.set_baseline(args.run, environment=environment)
                print(f"baseline of environment {(environment if environment is not None else run.environment) or '-'}: run {run.label}")
            elif args.action == "clear":
                print(f"baseline of environment {env or '-'} " + ("cleared" if store.clear_baseline(env) else "was not set"))
            else:
                pin = store.baseline(env)
                print(
                    f"baseline of environment {env or '-'}: "
                    + (f"run {pin.label} created {pin.created}" if pin else "none (checks use rolling:5)")
                )
    return 0


# ------------------------------------------------------------------------ report
def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="render report.html, summary.md, groups.csv and junit.xml from a snapshot")
    p.add_argument("snapshot", metavar="RUN_DIR|SNAPSHOT", help="run folder holding snapshot.json, or the snapshot file")
    p.add_argument("--out", help="folder for the report files (default: beside snapshot.json)")
    p.add_argument(
        "--compare",
        metavar="OTHER",
        help="another run folder or snapshot: show per group what changed against it (the monitor's drift tests)",
    )
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from specaudit.contracts.snapshot import load_snapshot, snapshot_path
    from specaudit.report import render_report

    snapshot = load_snapshot(args.snapshot)
    other = load_snapshot(args.compare) if args.compare else None
    paths = render_report(snapshot, args.out or snapshot_path(args.snapshot).parent, compare=other, compare_label=str(args.compare or ""))
    html = paths["html"]
    print(f"{html} ({html.stat().st_size / 1024:.0f} KiB); also {', '.join(p.name for k, p in paths.items() if k != 'html')}")
    return 0


# -------------------------------------------------------------------------- gate
def _add_gate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gate", help="judge a snapshot against thresholds: exit 0 pass (warnings allowed), 1 fail")
    p.add_argument("snapshot", metavar="RUN_DIR|SNAPSHOT", help="run folder holding snapshot.json, or the snapshot file")
    p.add_argument("--config", help="YAML config whose `gate:` section holds the thresholds (default thresholds otherwise)")
    p.add_argument("--write", action="store_true", help="store the verdict in the snapshot's `gate` section")
    p.set_defaults(func=cmd_gate)


def cmd_gate(args: argparse.Namespace) -> int:
    from specaudit.contracts.snapshot import load_snapshot, snapshot_path
    from specaudit.gate import evaluate_gate, load_thresholds
    from specaudit.records import write_json_atomic

    snapshot = load_snapshot(args.snapshot)
    result = evaluate_gate(snapshot, load_thresholds(args.config) if args.config else None)
    print(result.format())
    if args.write:
        snapshot["gate"] = result.to_dict()
        write_json_atomic(snapshot_path(args.snapshot), snapshot)
    return result.exit_code


# -------------------------------------------------------------------------- main
# ---------------------------------------------------------------------- mitigate
def _add_mitigate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mitigate",
        help="distil a better draft and derive per-group k / routing policies from an audited run, then re-audit on held-out prompts",
    )
    p.add_argument("run_dir", help="an analysed run folder (records.jsonl, manifest.json, snapshot.json)")
    p.add_argument("--out", required=True, help="new output folder (draft/, training_card.*, policy.*, before_after.*)")
    p.add_argument("--draft", help="trainable draft to start from: early-exit:N or a model folder (default: the run's draft)")
    p.add_argument(
        "--dimension",
        help="prompt attribute whose groups weight the training mix (default: the one with the lowest group relative to its reference)",
    )
    p.add_argument("--weighting", default="inverse-acceptance", help="inverse-acceptance (default), balanced or unweighted")
    p.add_argument(
        "--compare",
        default="unweighted",
        help="comma list of weightings also trained at the same budget for the comparison table ('' for none; default unweighted)",
    )
    p.add_argument("--objective", default="tv", help="tv (1 - acceptance per position, default) or kl (forward KL)")
    p.add_argument("--held-out", type=float, default=0.5, help="fraction of prompts (whole pairs) held out (default 0.5)")
    p.add_argument("--per-group", type=int, help="draw N prompts per group from the run's prompt set instead of the run's prompts")
    p.add_argument("--train-layers", type=int, default=2, help="upper draft layers trained, with the final norm (default 2)")
    p.add_argument("--learning-rate", type=float, default=3e-4, help="AdamW learning rate (default 3e-4)")
    p.add_argument("--steps", type=int, help="training steps (default 60; --quick 20)")
    p.add_argument("--batch-size", type=int, help="sequences per step (default 4)")
    p.add_argument("--samples", type=int, help="target samples per prompt (default 2; --quick 1)")
    p.add_argument("--max-new-tokens", type=int, help="tokens per target sample (default 32, at most the run's; --quick 16)")
    p.add_argument(
        "--equivalence-prompts",
        type=int,
        help="held-out prompts decoded by the real engine for the equivalence check (default 4; --quick 2; 0 skips it)",
    )
    p.add_argument("--timing-prompts", type=int, help="held-out prompts per group timed for the measured speed-up (default 1; --quick 0)")
    p.add_argument("--seed", type=int, default=0, help="split, sampling and training seed (default 0)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda[:N] (default auto)")
    p.add_argument("--quick", action="store_true", help="a smaller budget (1 sample, 16 tokens, 20 steps, no timing)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_mitigate)


def cmd_mitigate(args: argparse.Namespace) -> int:
    from specaudit.mitigate import mitigate

    compare = tuple(name for name in (args.compare or "").split(",") if name.strip())
    result = mitigate(
        args.run_dir,
        args.out,
        draft=args.draft,
        dimension=args.dimension,
        held_out=args.held_out,
        weighting=args.weighting,
        compare=tuple(n.strip() for n in compare),
        objective=args.objective,
        train_layers=args.train_layers,
        learning_rate=args.learning_rate,
        per_group=args.per_group,
        quick=args.quick,
        samples=args.samples,
        max_new_tokens=args.max_new_tokens,
        steps=args.steps,
        batch_size=args.batch_size,
        equivalence_prompts=args.equivalence_prompts,
        timing_prompts=args.timing_prompts,
        seed=args.seed,
        device=args.device,
        progress=not args.quiet,
    )
    summary = result.summary
    worst = summary["lowest_group_by_audit"]
    row = summary["comparison"]["groups"].get(worst) or summary["comparison"]["groups"]["(overall)"]
    print(
        f"{result.out_dir}/before_after.md: {summary['dimension']}={worst} acceptance {row['before']['value']:.3f} -> "
        f"{row['after']['value']:.3f}; equivalence {str(summary['equivalence'].get('status')).upper()}"
    )
    print(f"draft: {result.out_dir / 'draft'} (use with --draft); policy: {result.out_dir / 'policy.yaml'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specaudit",
        description="Audit speculative decoding for correctness and fairness.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_merge(sub)
    _add_analyze(sub)
    _add_audit(sub)
    _add_selftest(sub)
    _add_mitigate(sub)
    _add_prompts(sub)
    _add_report(sub)
    _add_gate(sub)
    _add_monitor(sub)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> str:
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
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse itself exits 2 on bad flags
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


if __name__ == "__main__":
    sys.exit(main())
