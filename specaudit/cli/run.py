"""`specaudit run`, `merge`, `analyze` and `audit`: the decoding, executor and analysis options they
share, and the audit that `monitor run` reuses."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from specaudit._validation import finite_float, seed_int
from specaudit.contracts import DEFAULT_BAND
from specaudit.contracts.run import SCREEN_ENGINE
from specaudit.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from specaudit.audit import AuditResult
    from specaudit.cli.dry_run import PlanOnly
    from specaudit.config import RunConfig
    from specaudit.decoding import SamplingSpec
    from specaudit.sampling_audit import SettingsAuditResult


# --------------------------------------------------------------------------- run


def command_line(args: argparse.Namespace) -> str:
    """The command as the user gave it: main()'s argv (a test or a script calling it has its own
    sys.argv), else the process's."""
    return " ".join(["specaudit", *getattr(args, "argv", sys.argv[1:])])


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
        help="comma list of screen, vanilla, speculative, tree, staged, hf-assisted (default: run vanilla,speculative; "
        "audit screen,vanilla,speculative); or a backend alone: endpoint (live servers, config `extra: {endpoint: ...}`), vllm (GPU) or llama-cpp (GGUF on CPU)",
    )
    g.add_argument("--k", type=int, help="draft tokens per verification step (default 4)")
    g.add_argument("--tree", help="with --engines tree: children per depth, e.g. 3,2,1 (default; docs/trees.md)")
    g.add_argument("--tree-children", help="with --engines tree: sampled (i.i.d. from the draft, default) or top-k")
    g.add_argument(
        "--levels",
        help="with --engines staged: the small draft and the medium model, e.g. ngram,int8 (default) or ngram,draft (the run's --draft)",
    )
    g.add_argument("--level-k", help="with --engines staged: tokens per round of the small draft and of the medium (default 4,4)")
    g.add_argument("--temperature", type=finite_float, help="0 = greedy (default 1.0)")
    g.add_argument("--top-k", type=int, help="0 = off")
    g.add_argument("--top-p", type=finite_float, help="1.0 = off")
    g.add_argument("--samples", type=int, help="samples per prompt and engine (default 1)")
    g.add_argument("--max-new-tokens", type=int, help="new tokens per output (default 32)")
    g.add_argument("--seed", type=seed_int, help="run seed (default 0)")
    g.add_argument("--timing-repeats", type=int, help="extra interleaved runs per prompt used only for latency")
    g.add_argument("--warmup", type=int, help="warm-up rounds before timing (default 1)")
    g.add_argument(
        "--max-consecutive-faults",
        type=int,
        help="engine calls failing in a row that stop the run (default 5); each failure is recorded in faults.jsonl",
    )
    g.add_argument("--verify", help="module:function of your own rejection step, run inside the speculative engine")
    g.add_argument(
        "--plant-disparity",
        help="dimension=group:factor (0 < factor < 1): on that group's prompts the draft's distribution becomes "
        "factor*q + (1-factor)*uniform, planting a known disparity (acceptance about factor x) to check the audit finds it",
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
    g.add_argument(
        "--per-group", type=int, help="stratified sample of N prompts per group (parallel dimensions: N pairs; audit default 10)"
    )
    g.add_argument("--sample-seed", type=seed_int, help="seed of the --per-group sample (default 0; independent of --seed)")
    g.add_argument("--dimensions", help="comma list of prompt dimensions to keep, e.g. dialect,language")
    g.add_argument(
        "--engine-prompts",
        type=int,
        help="with --engines screen,vanilla,speculative: the engines decode at most N of the screened prompts "
        "(default: one per group, whole pairs)",
    )
    from specaudit.cli.servers import add_server_options

    add_server_options(p)
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


def _run_config(args: argparse.Namespace) -> RunConfig:
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
    return _with_concurrency(args, lambda extra: run_config_from({**run_options, **_flag_options(args), **extra}, source), run_options)


def _with_concurrency(args: argparse.Namespace, make: Callable[[dict], RunConfig], run_options: dict) -> RunConfig:
    """The RunConfig `make(extra options)` builds, with the server flags (--speculative-url ...,
    --concurrency; cli/servers.py)."""
    from specaudit._validation import register_typed
    from specaudit.cli.servers import typed_server_flags, with_server_flags

    # from here on, a message about a setting the user gave as a flag names that flag
    register_typed({**{name: f"--{name.replace('_', '-')}" for name in _flag_options(args)}, **typed_server_flags(args)})
    return with_server_flags(args, make, run_options)


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


def add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="decode a prompt set with each engine and write records.jsonl")
    _add_decoding_options(p)
    _add_executor_options(p)
    p.add_argument("--out", required=True, help="run folder (created; re-running the same command resumes)")
    p.add_argument("--shard", help="i/N: run only shard i of N (stable by prompt id); combine with `specaudit merge`")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    from specaudit.execution.preflight import check_model_sources

    cfg = _run_config(args)
    check_model_sources(cfg)  # before the runner and prompt loading: an unreachable model fails in seconds

    from specaudit.engines import run
    from specaudit.execution.merge import parse_shard

    shard = parse_shard(args.shard) if args.shard else None
    summary = run(cfg, args.out, progress=not args.quiet, command=command_line(args), shard=shard)
    print(
        f"{summary.out_dir}/records.jsonl: {summary.records} records ({summary.written} new, {summary.skipped} resumed) in {summary.seconds:.1f} s"
        + (
            f"; {summary.faults} engine fault(s) in {summary.out_dir}/faults.jsonl (a finding: analyze and gate report it)"
            if summary.faults
            else ""
        )
    )
    return 0


def add_merge(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="combine shard run folders into one (settings must agree)")
    p.add_argument("--out", required=True, help="new run folder for the merged records")
    p.add_argument("run_dirs", nargs="+")
    p.set_defaults(func=cmd_merge)


def cmd_merge(args: argparse.Namespace) -> int:
    from specaudit.execution.merge import merge_runs

    count = merge_runs(args.out, args.run_dirs)
    print(f"{args.out}/records.jsonl: {count} records from {len(args.run_dirs)} shard(s)")
    return 0


# ----------------------------------------------------------------------- analyze
def _add_analysis_options(p: argparse.ArgumentParser, *, old_alpha: bool = True) -> None:
    """`old_alpha`: accept --alpha as the old spelling of --equivalence-alpha (not where --alpha is
    the command's own family-wise level: `monitor run`'s drift checks)."""
    g = p.add_argument_group("analysis")
    g.add_argument(
        "--equivalence-alpha",
        *(("--alpha",) if old_alpha else ()),
        dest="alpha",
        type=finite_float,
        action=RenamedFlag,
        help="family-wise error rate of the equivalence battery (default 0.05)" + ("; --alpha is its old spelling" if old_alpha else ""),
    )
    g.add_argument("--delta", type=finite_float, help="equivalence margin on total variation (default 0.05)")
    g.add_argument("--analyze-dimensions", dest="analyze_dimensions", help="prompt attributes to analyse (default: all in the run)")
    g.add_argument("--n-boot", type=int, help="bootstrap resamples of prompts (default 1000)")
    g.add_argument("--band", help="tolerance band on the ratio to the reference group (default {},{})".format(*DEFAULT_BAND))
    g.add_argument(
        "--fallback-threshold", type=finite_float, help="acceptance below which the fallback simulation routes to vanilla (default 0.5)"
    )
    g.add_argument(
        "--deployment-cost-ratio",
        type=finite_float,
        help="project each group's speed-up onto a deployment whose draft costs C target steps per token (e.g. 0.05 from a GPU run)",
    )
    g.add_argument(
        "--deployment-verify-cost",
        type=finite_float,
        help="with --deployment-cost-ratio: one verification pass's cost in target steps (default 1, memory-bound)",
    )
    g.add_argument(
        "--no-equivalence", dest="equivalence", action="store_const", const=False, help="skip the equivalence tests (no model loading)"
    )
    g.add_argument(
        "--reference",
        action="append",
        metavar="DIM=GROUP",
        help="the reference group of a dimension, e.g. dialect=sae (repeat for several dimensions; config `reference:` under "
        "analysis:); default: the prompt set's declared reference, else the best-served group (highest acceptance)",
    )


class RenamedFlag(argparse.Action):
    """A flag whose first spelling is current; the others still work, with a one-line note."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object, option_string: str | None = None
    ) -> None:
        if option_string and option_string != self.option_strings[0]:
            print(
                f"specaudit: note: {option_string} is now {self.option_strings[0]}; the old spelling works until the next release",
                file=sys.stderr,
            )
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_flag", option_string)  # errors name the flag as the user wrote it


def _analysis_kwargs(args: argparse.Namespace, base: dict | None = None, source: str = "options") -> dict:
    """analyze() keyword arguments: a config file's `analysis:` section overlaid with the flags given,
    each checked by AnalysisSettings and named as the user wrote it (a config key, then a flag)."""
    from specaudit.config import AnalysisSettings

    try:
        section = AnalysisSettings.parse(dict(base or {}), name=str)
    except InputError as err:
        raise InputError(f"{source}, `analysis:` section: {err}") from None
    flags = {
        name: getattr(args, name, None)
        for name in (
            "alpha",
            "delta",
            "n_boot",
            "fallback_threshold",
            "equivalence",
            "band",
            "deployment_cost_ratio",
            "deployment_verify_cost",
            "reference",
        )
    }
    flags["dimensions"] = getattr(args, "analyze_dimensions", None)
    flags = {("tolerance" if name == "band" else name): value for name, value in flags.items() if value is not None}
    spelled = {"dimensions": "--analyze-dimensions", "alpha": getattr(args, "alpha_flag", None) or "--equivalence-alpha"}
    settings = AnalysisSettings.parse(
        {**section.model_dump(), **flags}, name=lambda field: spelled.get(field, f"--{field.replace('_', '-')}")
    )
    return settings.model_dump()


def add_analyze(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", help="test equivalence and measure disparity: RUN_DIR/records.jsonl -> RUN_DIR/snapshot.json")
    p.add_argument("run_dir")
    p.add_argument("--device", help="device for scoring (default: the run's)")
    _add_analysis_options(p)
    p.set_defaults(func=cmd_analyze)


def cmd_analyze(args: argparse.Namespace) -> int:
    from specaudit.analysis import analyze
    from specaudit.report.view.statuses import audited_correctness

    snapshot = analyze(args.run_dir, device=args.device, **_analysis_kwargs(args))
    correctness = audited_correctness(snapshot.equivalence)  # the report's words: PASS is not a finding
    print(
        f"{args.run_dir}/snapshot.json: equivalence {correctness.value}, "
        f"{sum(len(v.by_group) for v in snapshot.groups.values())} groups in {len(snapshot.groups)} dimension(s)"
    )
    return 0


# ------------------------------------------------------------------------- audit
def add_audit_options(p: argparse.ArgumentParser, *, old_alpha: bool = True) -> None:
    """What `audit` and `monitor run` share: they run the same audit."""
    _add_decoding_options(p)
    _add_executor_options(p)
    _add_analysis_options(p, old_alpha=old_alpha)
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smaller budget (screen 3 prompts per group, engines on 8); measured on a 2-core CPU: 1 min 55 s for the default "
        "pair, 7 min 55 s for --pair qwen2.5-coder, 39 min for --engines llama-server, 8 min 23 s for --engines openvino",
    )
    p.add_argument(
        "--out",
        help="this run's folder (an existing one is resumed); default: a new folder <run-id> under reports/, or under the "
        "config's `out:`, so every run is a new audit",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--pair",
        help="a named real draft/target pair (qwen2.5-coder), fetched on first use: the screen beside llama.cpp over five "
        "dimensions at 10 prompts per group; with --quick, the language dimension at 8 per group (docs/real-pair.md)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan and its predicted time, then stop (nothing is decoded)")
    add_fail_on(p)
    p.add_argument(
        "--sampling",
        nargs="+",
        action="extend",
        metavar="SETTING",
        help="sampling settings to audit, each a whole audit in OUT/<setting>/: greedy, t=0.7,top_p=0.9, t=1,top_k=50 "
        "(config key `sampling:`); repeated --sampling flags add up; the gate fails if any setting fails. One setting is the same as "
        "--temperature/--top-k/--top-p",
    )


def add_fail_on(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fail-on",
        choices=("do-not-enable", "decision", "fail"),
        help="which decisions exit 1: the report's Do not enable, which every failing gate check leads to (do-not-enable, the "
        "default); also Insufficient evidence (decision); or failing checks only (fail) (config: `fail_on:` under gate:)",
    )


def with_fail_on(args: argparse.Namespace, gate_options: dict | None) -> dict:
    """The config's gate section with --fail-on over it (the flag wins)."""
    fail_on = getattr(args, "fail_on", None)
    return {**(gate_options or {}), **({"fail_on": fail_on} if fail_on else {})}


def add_audit(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit", help="run -> analyze -> report -> gate in one command (default: the embedded pair on core)")
    add_audit_options(p)
    p.add_argument(
        "--resume",
        nargs="?",
        const="",
        metavar="RUN_DIR",
        help="continue a killed audit in RUN_DIR (default: the last run under reports/, or under the config's `out:`) with the "
        "settings it was started with; records already there are kept; with --dry-run, predicts only what is left",
    )
    p.set_defaults(func=cmd_audit)


def _sampling_settings(args: argparse.Namespace, run_options: dict, source: str) -> list[SamplingSpec] | None:
    """The settings of `--sampling` (or the config's `sampling:`), None without either. Mixing them
    with --temperature/--top-k/--top-p would leave one of the two unused, so it is refused."""
    from specaudit.decoding.settings import parse_settings

    given = getattr(args, "sampling", None)
    from_file = run_options.pop("sampling", None)
    if given is None and from_file is None:
        return None
    values = given if given is not None else ([from_file] if isinstance(from_file, str) else from_file)
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
        raise InputError(f"{source}: `sampling:` must be a setting or a list of settings such as greedy, t=0.7,top_p=0.9")
    single = [f"--{name.replace('_', '-')}" for name in ("temperature", "top_k", "top_p") if getattr(args, name, None) is not None]
    from specaudit.contracts.engines import REQUEST_FEATURES

    single += [f"`{name}:`" for name in ("temperature", "top_k", "top_p", *REQUEST_FEATURES) if name in run_options]
    if single:
        raise InputError(f"--sampling sets the sampling; drop {', '.join(single)} (write it into a --sampling setting instead)")
    return parse_settings(values)


def _within_budget(budget: dict, options: dict) -> dict:
    """The budget overlaid with the options given; its cap on the engines' share of the screened
    prompts goes where the options choose engines without the screen (nothing to cap)."""
    engines = options.get("engines")
    names = engines.split(",") if isinstance(engines, str) else engines
    if names is not None and SCREEN_ENGINE not in [str(name).strip() for name in names]:
        budget = {key: value for key, value in budget.items() if key != "engine_prompts"}
    return {**budget, **options}


def run_audit(args: argparse.Namespace) -> AuditResult | SettingsAuditResult | PlanOnly:
    from specaudit.audit import DEFAULT_BUDGET, QUICK_BUDGET, pair_budget
    from specaudit.config import run_config_from

    run_options, analysis_options, gate_options, source = _config_file_sections(args)
    gate_options = with_fail_on(args, gate_options)
    runs_folder = run_options.pop("out", None)  # a config's `out:` is where its runs go, one new folder each
    if getattr(args, "resume", None) is not None:
        return _resume_audit(args, runs_folder, analysis_options, gate_options, source)
    specs = _sampling_settings(args, run_options, source)
    budget = QUICK_BUDGET if args.quick else DEFAULT_BUDGET
    if getattr(args, "pair", None):
        given = [flag for flag in ("target", "draft") if getattr(args, flag, None) or flag in run_options]
        if given:
            raise InputError(f"--pair names both models; drop {' and '.join('--' + g for g in given)}, or --pair")
        budget = pair_budget(args.pair, quick=args.quick)
    cfg = _with_concurrency(
        args, lambda extra: run_config_from(_within_budget(budget, {**run_options, **_flag_options(args), **extra}), source), run_options
    )
    if specs is not None and len(specs) == 1:  # one setting: an ordinary audit at it
        cfg, specs = cfg.with_setting(specs[0]), None
    from specaudit.execution.preflight import check_model_sources

    check_model_sources(cfg)
    out = args.out or _new_run_folder(runs_folder, cfg)
    if getattr(args, "dry_run", False):
        from specaudit.cli.dry_run import print_plan

        return print_plan(cfg, out, specs)
    if specs is not None:
        return _run_settings_audit(args, cfg, out, specs, analysis_options, gate_options, source)
    return _audit_and_print(args, cfg, out, analysis_options, gate_options, source)


def _new_run_folder(runs_folder: str | None, cfg: RunConfig) -> str:
    """A folder no run has used: <run-id> under the config's `out:` (default reports/), with a
    suffix where a run of the same second took the name."""
    from pathlib import Path

    from specaudit.audit import default_run_id

    parent = Path(runs_folder or "reports")
    if parent.exists() and not parent.is_dir():
        raise InputError(f"`out:` {parent} is a file; it names the folder the runs go in, one sub-folder each")
    run_id = default_run_id(cfg)
    folder, n = parent / run_id, 1
    while folder.exists():
        n += 1
        folder = parent / f"{run_id}-{n}"
    return str(folder)


# Flags that choose what a run decodes besides RunConfig's: the run being resumed has its own (its manifest).
_RUN_FLAGS = ("quick", "pair", "sampling", "speculative_url", "vanilla_url", "served_model", "api_key_env", "concurrency", "prefix_cache")


def _resume_audit(
    args: argparse.Namespace, runs_folder: str | None, analysis_options: dict, gate_options: dict, source: str
) -> AuditResult | PlanOnly:
    """`audit --resume [RUN_DIR]`: the run's own settings (its manifest) over the records already
    there; analysis and gate flags (and a config's `analysis:` and `gate:`) apply as given."""
    from specaudit.audit import last_run_folder, resumed_config

    given = [f"--{name.replace('_', '-')}" for name in _flag_options(args)]
    spelled = {"served_model": "model"}
    given += [f"--{spelled.get(name, name).replace('_', '-')}" for name in _RUN_FLAGS if getattr(args, name, None)]
    given += ["--out"] if args.out else []
    if given:
        raise InputError(f"--resume continues a run with the settings it was started with; drop {', '.join(given)}")
    run_dir = args.resume or last_run_folder(runs_folder or "reports")
    cfg = resumed_config(run_dir)
    if getattr(args, "dry_run", False):
        from specaudit.cli.dry_run import print_plan

        return print_plan(cfg, run_dir, resume=True)
    return _audit_and_print(args, cfg, run_dir, analysis_options, gate_options, source)


def _audit_and_print(
    args: argparse.Namespace, cfg: RunConfig, out: str | Path, analysis_options: dict, gate_options: dict, source: str
) -> AuditResult:
    """Audit into `out` (a new run folder, or one resumed) and print the verdict lines."""
    from specaudit.audit import audit

    result = audit(
        cfg,
        out,
        analysis=_analysis_kwargs(args, analysis_options, source),
        gate=gate_options,
        progress=not args.quiet,
        command=command_line(args),
    )
    print_verdict(result)
    return result


def print_verdict(result: AuditResult) -> None:
    """The audit's last lines: the report, correctness in the report's words (PASS only where the
    tests showed equivalence: "equivalent within delta"), the gate, then the decision and its exit code."""
    from specaudit.gate.results import decision_line
    from specaudit.report.view.statuses import audited_correctness

    correctness = audited_correctness(result.snapshot.equivalence)
    if result.resumed:
        print(f"resumed {result.out_dir}: {result.resumed} records were already there, {result.decoded} decoded now")
    print(f"report: {result.files['html']}")
    print(f"equivalence: {correctness.value.upper()}  gate: {result.gate_status.upper()}  (snapshot: {result.out_dir}/snapshot.json)")
    print(decision_line(result.decision, result.exit_code))


def _run_settings_audit(
    args: argparse.Namespace,
    cfg: RunConfig,
    out: str | Path,
    specs: Sequence[SamplingSpec],
    analysis_options: dict | None,
    gate_options: dict | None,
    source: str,
) -> SettingsAuditResult:
    from specaudit.sampling_audit import audit_settings

    result = audit_settings(
        cfg,
        out,
        specs,
        analysis=_analysis_kwargs(args, analysis_options, source),
        gate=gate_options,
        progress=not args.quiet,
        command=command_line(args),
    )
    from specaudit.gate.results import DECISIONS, DECISIONS_WORST_FIRST, decision_line

    for row in result.rows:
        print(
            f"{row['setting']}: equivalence {row['correctness'].upper()}  gate: {row['gate']}  decision: {DECISIONS[row['decision']]}"
            f"  (report: {out}/{row['folder']}/report.html)"
        )
    print(f"over {len(result.rows)} settings: gate {result.gate_status}  (summary: {result.files['summary']})")
    worst = min((row["decision"] for row in result.rows), key=DECISIONS_WORST_FIRST.index)
    print(decision_line(worst, result.exit_code) + " (the worst setting's)")
    return result


def cmd_audit(args: argparse.Namespace) -> int:
    return run_audit(args).exit_code
