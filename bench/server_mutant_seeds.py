"""The served-mutant rows of docs/selftest.md, seed by seed: one endpoint audit per (seed, server),
seed-major so every row gets its next seed in turn, one JSON line per audit appended to --log (a
run cut short keeps what it finished; a rerun skips the (server, seed) pairs already in the log).
At the end, each row's tally over every seed in the log with its Clopper-Pearson 95% interval.

    python bench/server_mutant_seeds.py --seeds 6-19 --log served.jsonl \
        --servers correct_features,penalties_last_token,...

The same audits as `specaudit selftest --skip-e2e --server-seeds N` (specaudit.testing.server_selftest:
the tiny pair, the core set's domain prompts, the default served budget), split so the seeds
already measured need not be run again.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=_seeds, required=True, help="e.g. 6-19")
    parser.add_argument("--servers", required=True, help="comma list of served mutants")
    parser.add_argument("--log", type=Path, required=True, help="JSONL of finished audits (appended)")
    args = parser.parse_args()

    from scipy import stats

    from specaudit.models import load_pair, save_tiny_pair
    from specaudit.prompts import load_prompts
    from specaudit.testing.server_selftest import server_audit

    servers = args.servers.split(",")
    done = set()
    if args.log.exists():
        done = {(row["server"], row["seed"]) for row in map(json.loads, args.log.read_text().splitlines())}
    with tempfile.TemporaryDirectory() as folder:
        target, draft = save_tiny_pair(folder)
        pair = load_pair(str(target), str(draft), device="cpu")
        prompts = load_prompts("core", dimensions=["domain"], per_group=1, seed=0)
        for seed in args.seeds:
            for server in servers:
                if (server, seed) in done:
                    continue
                audit = server_audit(pair, prompts, server, seed=seed)
                with args.log.open("a") as log:
                    log.write(json.dumps(audit) + "\n")
                print(f"{server} seed {seed}: caught={audit['caught']} findings={audit['findings']} {audit['seconds']:.0f} s", flush=True)

    rows = [json.loads(line) for line in args.log.read_text().splitlines()]
    for server in servers:
        audits = [row for row in rows if row["server"] == server]
        hits = sum(row["caught"] for row in audits)
        interval = stats.binomtest(hits, len(audits)).proportion_ci(0.95)
        what = "false alarms" if server.startswith("correct") else "named its cause"  # a correct server's "caught": any finding
        print(f"{server}: {what} {hits}/{len(audits)} [{interval.low:.2f}, {interval.high:.2f}]")


if __name__ == "__main__":
    main()
