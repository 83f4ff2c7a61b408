"""`specaudit traffic` (ingest, report, check) and `specaudit proxy`: monitoring on live traffic."""

from __future__ import annotations

import argparse
import sys

from specaudit._validation import finite_float
from specaudit.cli.run import RenamedFlag

STORE_HELP = "sqlite:///path.db, a bare file path, or postgresql://user@host/db"


def add_traffic(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "traffic",
        help="per-group acceptance and latency from the requests a server served; anytime-valid alerts",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "a job every minute (see docs/traffic.md):\n"
            "  specaudit traffic ingest logs/ --store sqlite:///traffic.db\n"
            "  specaudit traffic check --store sqlite:///traffic.db --alert-file alerts.jsonl --metrics-file traffic.prom\n"
            "exit codes: 0 no alert, 1 an alert, 2 bad input or unusable store"
        ),
    )
    actions = p.add_subparsers(dest="traffic_command", required=True)
    ingest = actions.add_parser(
        "ingest", help="read request logs (JSONL, .jsonl.gz, Parquet; files, folders, '-' for stdin) into the store"
    )
    ingest.add_argument("logs", nargs="+", metavar="LOG")
    ingest.add_argument("--store", required=True, help=STORE_HELP)
    ingest.add_argument(
        "--column-map",
        action="append",
        metavar="FIELD=PATH",
        help="where another log keeps a field, as a dotted path (e.g. latency_s=timing.total)",
    )
    ingest.add_argument(
        "--detect-language", action="store_true", help="identify each prompt's language (py3langid) unless a label declares it"
    )
    ingest.add_argument("--min-confidence", type=finite_float, default=0.5, help="below this the language is 'und' (default 0.5)")
    ingest.add_argument("--keep-text", action="store_true", help="store the prompt text too (request logs hold user data: off by default)")
    ingest.set_defaults(func=cmd_traffic_ingest)

    analysing = argparse.ArgumentParser(add_help=False)
    analysing.add_argument("--store", required=True, help=STORE_HELP)
    analysing.add_argument("--group-by", default="language", help="'language' (default) or 'label:NAME', e.g. label:tenant")
    analysing.add_argument(
        "--baseline-requests", type=int, default=1000, help="the first N requests (in time order) are the drift baseline; 0: no drift check"
    )
    analysing.add_argument(
        "--false-alarm-rate",
        "--alpha",
        dest="alpha",
        metavar="RATE",
        type=finite_float,
        default=0.05,
        action=RenamedFlag,
        help="the chance of any false alarm over all looks, anytime-valid (default 0.05); --alpha is its old spelling",
    )
    analysing.add_argument(
        "--band-low", type=finite_float, default=0.8, help="disparity alert below this ratio to the other groups (default 0.8)"
    )
    analysing.add_argument("--min-change", type=finite_float, default=0.10, help="drift alert past this relative change (default 0.10)")
    analysing.add_argument(
        "--adjust",
        default="prompt,output,sampling,load",
        help="strata to compare within: some of prompt,output,sampling,load, or none (default all)",
    )
    analysing.add_argument("--format", choices=("text", "json"), default="text")
    report = actions.add_parser(
        "report", parents=[analysing], help="per-group acceptance and latency per token with intervals; always exit 0"
    )
    report.set_defaults(func=cmd_traffic_report)
    check = actions.add_parser("check", parents=[analysing], help="anytime-valid disparity and drift checks; exit 1 on an alert")
    check.add_argument("--verbose", action="store_true", help="text: print checks without an alert too")
    check.add_argument("--alert-file", help="append alerts as JSON lines to this file")
    check.add_argument("--metrics-file", help="write Prometheus textfile-collector gauges per group here")
    check.set_defaults(func=cmd_traffic_check)
    fallback = actions.add_parser(
        "fallback",
        help="the 'below X%% acceptance, decode plainly' rule and mitigate's per-group policies, evaluated per group on the stored traffic",
    )
    fallback.add_argument("--store", required=True, help=STORE_HELP)
    fallback.add_argument("--group-by", default="language", help="'language' (default) or 'label:NAME'")
    fallback.add_argument("--threshold", type=finite_float, default=0.5, help="route requests below this acceptance (default 0.5)")
    fallback.add_argument("--k", type=int, default=4, help="draft tokens per step of the server (default 4)")
    fallback.add_argument(
        "--c", type=finite_float, default=0.1, help="a draft pass's cost in target steps (default 0.1; `specaudit analyze` measures it)"
    )
    fallback.add_argument("--v", type=finite_float, default=1.0, help="a verification step's cost in target steps (default 1.0)")
    fallback.set_defaults(func=cmd_traffic_fallback)


def add_proxy(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("proxy", help="forward OpenAI requests to a server and log one line per request for `traffic ingest`")
    p.add_argument("--upstream", required=True, help="the server's base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--log", required=True, metavar="DIR", help="folder for the rotating request logs")
    p.add_argument("--listen", default="127.0.0.1:8787", help="HOST:PORT to serve on (default 127.0.0.1:8787)")
    p.add_argument("--rotate-lines", type=int, default=100_000, help="start a new log file after this many lines (default 100000)")
    p.add_argument("--timeout", type=finite_float, default=600.0, help="seconds to wait for the upstream's answer (default 600)")
    p.set_defaults(func=cmd_proxy)


def cmd_traffic_ingest(args: argparse.Namespace) -> int:
    from specaudit.errors import InputError
    from specaudit.traffic import ingest, open_traffic_store, parse_column_map

    column_map = parse_column_map(args.column_map)
    with open_traffic_store(args.store) as store:
        try:
            result = ingest(
                store,
                args.logs,
                column_map=column_map,
                detect_language=args.detect_language,
                min_confidence=args.min_confidence,
                keep_text=args.keep_text,
            )
        except InputError as err:
            raise InputError(f"{err}; nothing of this ingest was stored") from None
    print(
        f"ingested {result.added} new requests from {result.lines} lines of {len(result.files)} file(s) ({result.duplicates} already stored)"
    )
    return 0


def _evaluate(args: argparse.Namespace) -> tuple:
    from specaudit.traffic import evaluate, open_traffic_store, parse_adjust

    strata = parse_adjust(args.adjust)
    with open_traffic_store(args.store, create=False) as store:
        result = evaluate(
            store,
            group_by=args.group_by,
            baseline_requests=args.baseline_requests,
            alpha=args.alpha,
            band_low=args.band_low,
            min_change=args.min_change,
            strata=strata,
        )
        return result, store.url


def cmd_traffic_report(args: argparse.Namespace) -> int:
    from specaudit.traffic import render_text, summaries_json

    result, _ = _evaluate(args)
    print(summaries_json(result) if args.format == "json" else render_text(result, verbose=True))
    return 0


def cmd_traffic_check(args: argparse.Namespace) -> int:
    from specaudit.traffic import render_text, summaries_json, write_outputs

    result, url = _evaluate(args)
    write_outputs(result, alert_file=args.alert_file, metrics_file=args.metrics_file, store_url=url)
    print(summaries_json(result) if args.format == "json" else render_text(result, verbose=args.verbose))
    return 1 if result.alerts else 0


def cmd_traffic_fallback(args: argparse.Namespace) -> int:
    from specaudit.traffic import open_traffic_store
    from specaudit.traffic._fallback import evaluate_fallback, evaluate_policies, render_fallback, render_policies

    with open_traffic_store(args.store, create=False) as store:
        rows = evaluate_fallback(store, group_by=args.group_by, threshold=args.threshold, k=args.k, c=args.c, v=args.v)
        policies = evaluate_policies(store, group_by=args.group_by, k=args.k, c=args.c, v=args.v)
    print(render_fallback(rows, args.threshold))
    print(render_policies(policies, args.k))
    return 0


def cmd_proxy(args: argparse.Namespace) -> int:
    from specaudit.traffic.proxy import serve

    serve(args.upstream, args.log, listen=args.listen, rotate_lines=args.rotate_lines, timeout=args.timeout, out=sys.stderr)
    return 0
