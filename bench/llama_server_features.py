"""llama-server audited with each request feature on (docs/llama-cpp.md, "Request features on
llama-server"): one `specaudit audit --engines llama-server --concurrency 1,4` per (pair, setting,
seed), speculation on against off, one JSON line per audit appended to --log (a rerun skips what
the log holds), then a verdict per setting over its seeds.

    python bench/llama_server_features.py --pair embedded --seeds 0-1 --log features.jsonl --out runs/
    python bench/llama_server_features.py --pair qwen --settings rep,minp --seeds 0 --log ... --out ...

A setting is decided FAIL only when its rejection replicates: one rejection among a few seeds at
the audit's alpha is what a correct engine gives now and then.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
SETTINGS = {
    "plain": "t=1",
    "rep": "t=1,repetition_penalty=1.3",
    "presence-frequency": "t=1,presence_penalty=0.5,frequency_penalty=0.5,repeat_last_n=64",
    "minp": "t=1,min_p=0.1",
    # ',' (28), '.' (30) and ' the' (260) in SmolLM2's vocabulary; the same ids are other tokens in Qwen's
    "logit-bias": "t=1,logit_bias=28:-3;30:2;260:1.5",
    "stop": r"t=1,stop=\n|. ",
    "grammar": f"t=1,grammar={HERE / 'data' / 'answer.schema.json'}",
    # every sampling feature at once: a screen for the slower pair, taken apart only if it fails
    "combined": "t=1,repetition_penalty=1.3,presence_penalty=0.5,frequency_penalty=0.5,repeat_last_n=64,min_p=0.05,logit_bias=28:-3;30:2;260:1.5",
}
PAIRS = {
    "embedded": [],  # the embedded SmolLM2-135M-Instruct Q4_1 GGUF, prompt lookup (ngram-simple)
    "qwen": [
        "--target",
        str(Path.home() / ".cache/specaudit/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
        "--draft",
        str(Path.home() / ".cache/specaudit/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
    ],
}


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def summarise(folder: Path) -> dict:
    """The figures a verdict needs, from one audit's snapshot."""
    snapshot = json.loads((folder / "snapshot.json").read_text())
    engines = snapshot["equivalence"]["engines"]

    def fit(name: str) -> dict:
        test = engines[name].get("goodness_of_fit") or {}
        power = engines[name].get("power") or {}
        return {
            "verdict": engines[name]["verdict"],
            "holm_p": test.get("pvalue"),
            "tokens": test.get("n_tokens"),
            "impossible": (test.get("impossible_tokens") or {}).get("statistic"),
            "pit_tv_80": power.get("pit_tv"),
        }

    parity = snapshot.get("logprob_parity") or {}
    invariants = snapshot.get("output_invariants") or {}
    faults = snapshot.get("engine_faults") or {}
    return {
        "speculative": fit("speculative"),
        "control": fit("vanilla"),
        "gate": snapshot["gate"]["status"],
        "logprob_parity": {key: parity.get(key) for key in ("status", "positions", "differing", "zero_logprob", "max_abs_diff")},
        "invariants": {key: invariants.get(key) for key in ("status", "violations", "checks")},
        "faults": faults.get("count"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", choices=sorted(PAIRS), default="embedded")
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"comma list of {', '.join(SETTINGS)}")
    parser.add_argument("--seeds", type=_seeds, default=[0])
    parser.add_argument("--log", type=Path, required=True, help="JSONL of finished audits (appended)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the audits' run folders")
    args = parser.parse_args()

    rows = [json.loads(line) for line in args.log.read_text().splitlines()] if args.log.exists() else []
    done = {(row["pair"], row["setting"], row["seed"]) for row in rows if "speculative" in row}
    names = args.settings.split(",")
    for seed in args.seeds:
        for name in names:
            if (args.pair, name, seed) in done:
                continue
            folder = args.out / f"{args.pair}-{name}-s{seed}"
            command = [
                str(Path(sys.executable).parent / "specaudit"),
                "audit",
                "--engines",
                "llama-server",
                "--concurrency",
                "1,4",
                "--dimensions",
                "language",
                "--per-group",
                "1",
                "--max-new-tokens",
                "24",
                "--seed",
                str(seed),
                *PAIRS[args.pair],
                "--sampling",
                SETTINGS[name],
                "--out",
                str(folder),
                "--quiet",
            ]
            started = time.perf_counter()
            finished = subprocess.run(command, capture_output=True, text=True)
            row = {
                "pair": args.pair,
                "setting": name,
                "sampling": SETTINGS[name],
                "seed": seed,
                "exit": finished.returncode,
                "seconds": round(time.perf_counter() - started),
                "command": command[1:],
            }
            if (folder / "snapshot.json").exists():
                row.update(summarise(folder))
            else:
                row["error"] = finished.stderr.strip().splitlines()[-1:]
            with args.log.open("a") as log:
                log.write(json.dumps(row) + "\n")
            rows.append(row)
            print(
                json.dumps({key: row.get(key) for key in ("setting", "seed", "exit", "seconds", "speculative", "control", "gate")}),
                flush=True,
            )

    for name in names:
        runs = [row for row in rows if row["pair"] == args.pair and row["setting"] == name and "speculative" in row]
        fails = sum(row["speculative"]["verdict"] == "FAIL" for row in runs)
        control_fails = sum(row["control"]["verdict"] == "FAIL" for row in runs)
        print(f"{name}: speculative FAIL in {fails} of {len(runs)} seeds; control FAIL in {control_fails}")


if __name__ == "__main__":
    main()
