"""`specaudit monitor` (alias `history`): the snapshot history store, drift checks, alerts, trend
report and Prometheus export."""

from __future__ import annotations

import argparse
import secrets
import sys

from specaudit._validation import finite_float, positive_int
from specaudit.cli.run import add_audit_options, run_audit
from specaudit.errors import InputError


# ----------------------------------------------------------------------- monitor
def add_monitor(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "monitor",
        aliases=["history"],
        help="history store of snapshots, drift against a baseline, alerts, trend report",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "a nightly job (cron, systemd timer, CI schedule; see docs/scheduling.md):\n"
            "  specaudit monitor check runs/today --store sqlite:///history.db --environment prod \\\n"
            "      --alert-file alerts.jsonl --metrics-file /var/lib/node_exporter/textfile/specaudit.prom\n"
            "exit codes: 0 no FAIL, 1 a check FAILed, 2 bad input or unusable store"
        ),
    )
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
        "--min-change", type=finite_float, default=0.10, help="practical threshold: relative worsening that FAILs (default 0.10)"
    )
    checking.add_argument("--no-cusum", dest="cusum", action="store_false", help="skip the CUSUM slow-drift check over the history")
    checking.add_argument("--cusum-h", type=finite_float, help="CUSUM threshold (default ln(series / alpha) / (2k), k = 0.5)")
    checking.add_argument(
        "--alpha",
        dest="drift_alpha",
        metavar="ALPHA",
        type=finite_float,
        default=0.05,
        help="family-wise error rate over groups x metrics, Holm (default 0.05)",
    )
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
    run = actions.add_parser(
        "run",
        parents=[common, checking],
        help="run an audit (the flags and config of `specaudit audit`) into a new run folder, store its snapshot and check it; "
        "exit 1 where the check fails or the audit's decision does (--fail-on)",
    )
    add_audit_options(run, old_alpha=False)  # --alpha is the drift checks' level; the audit's is --equivalence-alpha
    report = actions.add_parser("report", parents=[common], help="trend report: OUT/trend.html (self-contained) and OUT/trend.csv")
    report.add_argument("--out", default="reports/trend", help="output folder (default reports/trend)")
    report.add_argument("--metrics", default="acceptance_rate,speedup", help="comma list of metrics to chart")
    report.add_argument("--dimensions", help="comma list of dimensions to chart (default all)")
    report.add_argument("--last", type=positive_int, default=50, help="latest N runs (default 50)")
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
    add.set_defaults(func=cmd_add)
    check.set_defaults(func=cmd_check)
    run.set_defaults(func=cmd_run)
    report.set_defaults(func=cmd_report)
    export.set_defaults(func=cmd_export)
    listing.set_defaults(func=cmd_list)
    show.set_defaults(func=cmd_show)
    baseline.set_defaults(func=cmd_baseline)


def _environment(args: argparse.Namespace) -> str | None:
    import os

    return args.environment if args.environment is not None else os.environ.get("SPECAUDIT_ENVIRONMENT")


def _check_settings(args: argparse.Namespace) -> None:
    """Every setting of a check is refused before anything is stored or decoded."""
    from specaudit.monitor._drift import check_settings

    check_settings(alpha=args.drift_alpha, min_change=args.min_change, cusum_h=args.cusum_h)


def cmd_add(args: argparse.Namespace) -> int:
    from specaudit import monitor
    from specaudit.monitor._store import parse_tags

    with monitor.open_store(args.store, create=True) as store:
        added = store.add(args.snapshot, environment=_environment(args) or "", tags=parse_tags(args.tag))
        verb = "stored" if added.added else "already stored (same snapshot)"
        print(f"{verb}: run {added.run.label} created {added.run.created}, environment {added.run.environment or '-'}, in {store.url}")
        if added.same_run is not None:
            print(f"specaudit: note: {added.note}", file=sys.stderr)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Compare a run with its baseline (storing SNAPSHOT first when given); exit 1 on FAIL."""
    import json

    from specaudit import monitor
    from specaudit.monitor._check import check_baseline
    from specaudit.monitor._store import parse_tags

    _check_settings(args)
    environment = _environment(args)
    snapshot = args.snapshot or getattr(args, "snapshot_option", None)
    if snapshot:
        with monitor.open_store(args.store, create=True) as store:
            check_baseline(store, args.baseline, environment)
    with monitor.open_store(args.store, create=bool(snapshot)) as store:
        run = args.run
        if snapshot:
            added = store.add(snapshot, environment=environment or "", tags=parse_tags(args.tag))
            if added.note:  # not a new audit: say so, a check of it against itself would pass silently
                print(f"specaudit: note: {added.note}", file=sys.stderr)
            run = added.run.id
        metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
        result = monitor.check(
            store,
            run,
            baseline=args.baseline,
            environment=environment,
            metrics=metrics,
            alpha=args.drift_alpha,
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


def cmd_run(args: argparse.Namespace) -> int:
    """Audit (the flags and config of `specaudit audit`, always into a new run folder unless --out
    names one), then store and check the snapshot. Exit 1 where the check FAILs or the audit's own
    exit code is 1 (its decision under --fail-on, as `audit`)."""
    import contextlib

    from specaudit import monitor
    from specaudit.monitor._check import check_baseline
    from specaudit.sampling_audit import SettingsAuditResult

    _check_settings(args)
    if args.seed is None and args.out is None and not getattr(args, "resume", None):
        # A new audit draws new samples: the same decoding seed every night would decode the same tokens
        # again and add no evidence. The prompts stay the same (their sample has its own seed, sample_seed).
        args.seed = secrets.randbelow(2**31)
        print(f"monitor run: decoding seed {args.seed} (a new one each run; --seed pins one)", file=sys.stderr)
    if args.dry_run:  # the audit's plan only: nothing decoded, nothing stored
        return run_audit(args).exit_code
    # Open the store before minutes of decoding: a foreign or damaged database fails first.
    with monitor.open_store(args.store, create=True) as store:
        check_baseline(store, args.baseline, _environment(args))
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the check (JSON with --format json)
        result = run_audit(args)
    args.run = "latest"
    if not isinstance(result, SettingsAuditResult):
        args.snapshot = str(result.out_dir)
        return max(result.exit_code, cmd_check(args))
    # --sampling: one audit per setting, each monitored as its own environment ENV/SETTING (a
    # setting is compared with its own history, never with another setting's)
    environment = _environment(args) or ""
    codes = [result.exit_code]
    for row in result.rows:
        args.snapshot = str(result.out_dir / row["folder"])
        args.environment = f"{environment}/{row['setting']}" if environment else row["setting"]
        codes.append(cmd_check(args))
    return max(codes)


def cmd_report(args: argparse.Namespace) -> int:
    from specaudit import monitor

    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    dims = [d.strip() for d in args.dimensions.split(",")] if args.dimensions else None
    with monitor.open_store(args.store, create=False) as store:
        report = monitor.write_trend_report(
            store, args.out, environment=_environment(args), last=args.last or None, metrics=metrics, dimensions=dims, title=args.title
        )
    print(f"{report.html_path} and {report.csv_path}: {report.n_runs} run(s), {report.n_charts} chart(s)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from specaudit import monitor

    with monitor.open_store(args.store, create=False) as store:
        text = monitor.metrics_text(store, args.run, environment=_environment(args))
    if args.metrics_file:
        print(f"{monitor.write_atomic(args.metrics_file, text)}: {text.count(chr(10))} lines")
    else:
        sys.stdout.write(text)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    import json

    from specaudit import monitor
    from specaudit.monitor._check import alert_counts, history_table
    from specaudit.monitor._store import parse_tags

    if args.limit < 0:
        raise InputError(f"--limit must be >= 0 (0 shows all runs), got {args.limit}")
    environment, tags = _environment(args), parse_tags(args.tag)
    with monitor.open_store(args.store, create=False) as store:
        runs = store.runs(environment=environment, tags=tags, limit=args.limit or None)
        if args.format == "json":
            print(json.dumps([r.to_dict() for r in runs], indent=2))
            return 0
        print(history_table(runs, pins=store.baselines(), alerts=alert_counts(store, runs)) if runs else f"no runs in {store.url}")
        total = len(store.runs(environment=environment, tags=tags)) if args.limit and len(runs) == args.limit else len(runs)
        if total > len(runs):
            print(f"{len(runs)} of {total} shown (--limit 0 for all)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    import json

    from specaudit import monitor
    from specaudit.monitor._check import describe_run

    with monitor.open_store(args.store, create=False) as store:
        run = store.get(args.run, environment=_environment(args))
        print(json.dumps(store.snapshot(run), indent=2) if args.format == "json" else describe_run(store, run))
    return 0


def cmd_baseline(args: argparse.Namespace) -> int:
    from specaudit import monitor

    environment = _environment(args)
    env = environment or ""
    with monitor.open_store(args.store, create=False) as store:
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
