"""`specaudit selftest`: the auditor audits itself (unit and end-to-end mutant samplers)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from specaudit.errors import InputError

if TYPE_CHECKING:
    import pandas as pd


def add_selftest(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("selftest", help="the auditor audits itself: false alarms of the correct sampler, detection of mutants")
    p.add_argument(
        "--quick",
        action="store_true",
        help="fewer seeds (unit 10, end-to-end 3); a mutant the quick budget cannot reach is reported, not failed",
    )
    p.add_argument("--seeds", type=int, help="seeds per sampler for the unit audit (default 200)")
    p.add_argument("--e2e-seeds", type=int, help="seeds per sampler for the end-to-end audit (default 20)")
    p.add_argument(
        "--identity",
        action="store_true",
        help="only the identity-draft check: each of --engines runs with --draft target, its acceptance held to its rule's "
        "(1 for rejection sampling, E[max p] for a greedy draft kept on a match); about a minute per engine and setting",
    )
    p.add_argument(
        "--trees",
        action="store_true",
        help="only the tree and staged rules: the unit audit (stats.tree_audit) of each exact rule and each mutant "
        "over --seeds (default 200, 10 with --quick); docs/trees.md",
    )
    p.add_argument(
        "--engines",
        help="with --identity: comma list of engines (default speculative), e.g. speculative,hf-assisted,llama-cpp",
    )
    p.add_argument(
        "--target",
        help="end-to-end pair: tiny (random 2-layer models, default) or a target such as default; "
        "with --identity the target drafting for itself (default: the embedded default)",
    )
    p.add_argument("--draft", default="int8", help="draft for a non-tiny end-to-end target (default int8)")
    p.add_argument("--samplers", help="comma list of samplers (default: correct and every mutant)")
    p.add_argument("--skip-e2e", action="store_true", help="only the unit audit (and the server part)")
    p.add_argument("--skip-servers", action="store_true", help="leave out the server mutants (the endpoint audit of batching servers)")
    p.add_argument("--servers", help="comma list of served mutants (default: all; the grammar ones need llguidance)")
    p.add_argument("--server-seeds", type=int, help="seeds per served mutant (default 20, 3 with --quick)")
    p.add_argument(
        "--sampling",
        nargs="+",
        action="extend",
        metavar="SETTING",
        help="end-to-end sampling settings, each run for every sampler: greedy, t=0.7,top_p=0.9, t=1,top_k=50 (default t=1); "
        "repeated --sampling flags add up",
    )
    p.set_defaults(func=cmd_selftest)


def cmd_selftest(args: argparse.Namespace) -> int:
    import tempfile

    import pandas as pd

    from specaudit.decoding.settings import parse_settings
    from specaudit.selftest import MUTANTS
    from specaudit.selftest.end_to_end import e2e_samplers, end_to_end_selftest
    from specaudit.selftest.harness import unit_selftest

    for flag, value in (("--seeds", args.seeds), ("--e2e-seeds", args.e2e_seeds), ("--server-seeds", args.server_seeds)):
        if value is not None and value < 1:
            raise InputError(f"{flag} must be an integer >= 1, got {value}")
    if args.identity:
        return _identity_part(args)
    if args.trees:
        return _tree_part(args)
    if args.engines is not None:
        raise InputError("--engines chooses the engines of --identity; add --identity or drop --engines")
    args.target = args.target or "tiny"
    everything = e2e_samplers()
    samplers = [s.strip() for s in args.samplers.split(",") if s.strip()] if args.samplers is not None else list(everything)
    if not samplers:
        raise InputError(f"--samplers names no sampler; give a comma list from {', '.join(everything)}, or leave it out for all")
    unknown = [s for s in samplers if s not in everything]
    if unknown:
        raise InputError(f"unknown sampler(s) {', '.join(unknown)}; choose from {', '.join(everything)}")
    settings = parse_settings(args.sampling or ["t=1"])
    if not args.skip_servers:
        _server_names(args)  # bad input fails before minutes of unit audits
    pd.set_option("display.width", 200)
    unit_seeds = range(args.seeds) if args.seeds is not None else None
    unit = None
    in_unit = [s for s in samplers if s in MUTANTS]  # field mutants need the engine's logits
    if in_unit:
        unit = unit_selftest(seeds=unit_seeds, quick=args.quick, samplers=in_unit)
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
            e2e = pd.concat(
                [end_to_end_selftest(pair, prompts, samplers=samplers, seeds=seeds, spec=spec, quick=args.quick) for spec in settings],
                ignore_index=True,
            )
        print(f"\nend to end (mutant inside the speculative engine, full analysis; target {args.target}):")
        print(e2e.drop(columns="expected", errors="ignore").to_string(index=False, float_format=lambda x: f"{x:.3g}"))
        unexpected = e2e[~e2e.get("expected", pd.Series("caught", index=e2e.index)).isin(["caught", "calibrated"])]
        if len(unexpected):
            print("\nnot required to be caught here (a row's target says what it is held to instead):")
            for row in unexpected.itertuples():
                print(f"  {row.sampler} at {row.sampling}: {row.expected}")
    served = None if args.skip_servers else _server_part(args)
    # The exit code covers every part that ran: a row of any table that missed its target fails it.
    missed = [
        f"{part} {name}"
        for part, table, column in (("unit", unit, "sampler"), ("end-to-end", e2e, "sampler"), ("server", served, "server"))
        if table is not None
        for name in table.loc[~table["ok"].astype(bool), column]
    ]
    if missed:
        print(f"\nselftest failed: {', '.join(missed)} missed the target", file=sys.stderr)
    return 1 if missed else 0


def _tree_part(args: argparse.Namespace) -> int:
    """`--trees`: calibration of the exact tree and staged rules and detection of their mutants;
    exit 1 when a row misses its target."""
    from specaudit.selftest.tree_harness import tree_selftest

    samplers = [s.strip() for s in args.samplers.split(",") if s.strip()] if args.samplers else None
    table = tree_selftest(seeds=range(args.seeds) if args.seeds else None, quick=args.quick, samplers=samplers)
    print("tree and staged rules (unit audit on (p, q) families, tree 3,2,1; staged k = 4 in rounds of 2):")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    missed = list(table.loc[~table["ok"], "sampler"])
    if missed:
        print(f"\nselftest failed: {', '.join(missed)} missed the target", file=sys.stderr)
    return 1 if missed else 0


def _identity_part(args: argparse.Namespace) -> int:
    """`--identity`: every engine with the target as its own draft (specaudit.selftest.identity);
    exit 1 when any row's acceptance falls outside its rule's interval. `--samplers` plugs verify
    functions (correct, a mutant) into the speculative engine."""
    from specaudit.decoding.settings import parse_settings
    from specaudit.prompts import load_prompts
    from specaudit.selftest.end_to_end import e2e_samplers
    from specaudit.selftest.identity import check_engine_names, failed_rows, identity_selftest

    engines = check_engine_names((args.engines or "speculative").split(","))
    everything = e2e_samplers()
    samplers = [s.strip() for s in (args.samplers or "correct").split(",") if s.strip()]
    unknown = [s for s in samplers if s not in everything]
    if unknown or not samplers:
        raise InputError(f"unknown sampler(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(everything)}")
    verifies = [None if s == "correct" else f"{everything[s].__module__}:{everything[s].__name__}" for s in samplers]
    settings = parse_settings(args.sampling or ["greedy", "t=1"])
    prompts = load_prompts("core", dimensions=["domain"], per_group=1, seed=0)
    table = identity_selftest(engines, settings, prompts, target=args.target or "default", verifies=verifies)
    print("identity draft (each engine with --draft target; acceptance against its rule's interval):")
    shown = table.drop(columns="message")
    print(shown.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    failed = failed_rows(table)
    for row in table[table["verdict"] == "FAIL"].itertuples():
        print(f"  FAIL {row.engine} at {row.sampling} ({row.verify}): {row.message}")
    if failed:
        print(f"\nidentity check failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _server_part(args: argparse.Namespace) -> pd.DataFrame:
    """The server mutants (specaudit.testing.server_selftest) on the tiny pair, two reference servers each."""
    import tempfile

    from specaudit.models import load_pair, save_tiny_pair
    from specaudit.prompts import load_prompts
    from specaudit.testing.server_selftest import server_selftest

    servers = _server_names(args)
    with tempfile.TemporaryDirectory() as folder:
        target, draft = save_tiny_pair(folder)
        pair = load_pair(str(target), str(draft), device="cpu")
        prompts = load_prompts("core", dimensions=["domain"], per_group=1, seed=0)
        seeds = range(args.server_seeds) if args.server_seeds is not None else None
        table = server_selftest(pair, prompts, servers=servers, seeds=seeds, quick=args.quick)
    print("\nserver mutants (two reference servers on 127.0.0.1, endpoint audit at concurrency 1 and 4, tiny pair):")
    print(table.drop(columns="cause").to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    return table


def _server_names(args: argparse.Namespace) -> list[str] | None:
    """The --servers names, checked; None without the flag (every server the install can run)."""
    from specaudit.testing.server_mutants import SERVER_MUTANTS

    if args.servers is None:
        return None
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    if not servers:
        raise InputError(f"--servers names no server; give a comma list from {', '.join(SERVER_MUTANTS)}, or leave it out for all")
    unknown = [s for s in servers if s not in SERVER_MUTANTS]
    if unknown:
        raise InputError(f"unknown server mutant(s) {', '.join(unknown)}; choose from {', '.join(SERVER_MUTANTS)}")
    return servers
