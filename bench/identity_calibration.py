"""The identity-draft check's own figures (docs/selftest.md, "The identity draft").

1. Numerics: the reference speculative engine with `--draft target` at greedy and t=1, and how far
   its q (one token a call) is from its p (a batch of k + 1): the mean and largest rejection chance
   1 − min(1, p/q) of a correct verifier over the drafted tokens (the records' `accept_prob`),
   which the tolerance ε must cover.
2. Calibration of the greedy-match rule (llama.cpp's): runs simulated in the engine's own step
   structure along paths whose a_t are drawn like a peaked model's, each draft kept with chance
   a_t: the false-alarm rate at alpha over many seeds, and the detection rate of two broken rules.

    .venv/bin/python bench/identity_calibration.py [--target default|tiny] [--seeds 2000]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
from scipy import stats

from specaudit.analysis.identity import identity_check, judged_positions
from specaudit.config import RunConfig
from specaudit.contracts.status import CheckStatus
from specaudit.engines import run
from specaudit.execution.records import read_records
from specaudit.models import load_pair, save_tiny_pair
from specaudit.prompts import load_prompts
from specaudit.stats.acceptance import sample_run
from specaudit.stats.identity import GREEDY_MATCH, REJECTION_SAMPLING, identity_acceptance_test


def numerics(target: str, folder: str) -> None:
    import torch

    torch.set_num_threads(1)  # as a run's own loading does (engines.decode.load_pair_for)
    if target == "tiny":
        target = str(save_tiny_pair(folder)[0])
    pair = load_pair(target, "target", device="cpu")
    prompts = load_prompts("core", dimensions=["domain"], per_group=1, seed=0)
    for temperature in (0.0, 1.0):
        cfg = RunConfig(
            engines=("speculative",), target=target, draft="target", temperature=temperature, samples=1 if temperature == 0 else 2,
            max_new_tokens=32, warmup=0,
        )  # fmt: skip
        out = f"{folder}/t{temperature}"
        started = time.perf_counter()
        run(cfg, out, pair=pair, prompt_set=prompts, progress=False)
        seconds = time.perf_counter() - started
        records = read_records(f"{out}/records.jsonl")
        rejection = np.array([1.0 - a for r in records for step in r["accept_prob"] for a in step])
        result, _ = identity_check(records, REJECTION_SAMPLING)
        print(
            f"{target} t={temperature:g}: {len(records)} records in {seconds:.1f} s; drafted {rejection.size}, "
            f"rejection chance mean {rejection.mean():.2g} max {rejection.max():.2g}; {result.describe()}"
        )


def _simulated(rng: np.random.Generator, keep, runs: int = 16, length: int = 32, k: int = 4) -> tuple[int, list[float]]:
    chances, kept = [], 0
    for _ in range(runs):
        accept = rng.beta(4, 1.5, length).tolist()
        accepted, proposed = sample_run([keep(a) for a in accept], k, length, rng)
        positions, n = judged_positions({"accepted_per_step": accepted, "proposed_per_step": proposed, "output_token_ids": accept})
        chances += [accept[t] for t in positions]
        kept += n
    return kept, chances


def calibration(seeds: int) -> None:
    rng = np.random.default_rng(0)
    for label, keep in (
        ("correct", lambda a: a),
        ("always keeps the greedy draft", lambda a: 1.0),
        ("flatter p (a^1.6)", lambda a: a**1.6),
    ):
        fails = sum(identity_acceptance_test(*_simulated(rng, keep), rule=GREEDY_MATCH).verdict == CheckStatus.FAIL for _ in range(seeds))
        interval = stats.binomtest(fails, seeds).proportion_ci(0.95)
        print(
            f"greedy match, {label}: FAIL in {fails} of {seeds} runs ({fails / seeds:.4f}, 95% CI {interval.low:.4f}-{interval.high:.4f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="default")
    parser.add_argument("--seeds", type=int, default=2000)
    parser.add_argument("--skip-engine", action="store_true")
    args = parser.parse_args()
    if args.seeds:
        calibration(args.seeds)
    if not args.skip_engine:
        with tempfile.TemporaryDirectory() as folder:
            numerics(args.target, folder)


if __name__ == "__main__":
    main()
