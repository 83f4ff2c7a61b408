"""Our sampler audit against a vLLM-style convergence check, on the same mutant samplers.

    python bench/convergence.py [--seeds 5] [--samples 100000]

The convergence check is written here from its published description (ANCHORS.md): vocabulary
10, k = 2, random Dirichlet draft and target distributions; the sampler is called up to 10^5
times; at sample sizes 10, 100, ..., 10^5 the L2 distance of each position's empirical
histogram to the target is compared with its distance to a random reference distribution; the
sampler passes when the distance to the target shrinks at least 20× more than the distance to
the reference from the first size to the last. It has no stated false-alarm rate and needs
~10^5 samples per distribution.

specaudit's `audit_sampler` runs at its default budget (13 (p, q) families, 400 trials each,
χ² per position, Holm at α = 0.05). Both see the same seeds. Printed per sampler: how often each
method rejects, the samples each consumed (verify calls and emitted tokens), and seconds,
measured side by side in this run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from specaudit.selftest.mutants import MUTANTS
from specaudit.stats.sampler_audit import audit_sampler

SIZES = (10, 100, 1_000, 10_000, 100_000)
MULTIPLIER = 20.0
VOCAB, K = 10, 2


def convergence_check(verify, seed: int, n_samples: int = SIZES[-1]) -> tuple[bool, int]:
    """(passed, emitted tokens) of the convergence check on one random (p, q) pair."""
    rng = np.random.default_rng(seed)
    p = torch.tensor(rng.dirichlet(np.ones(VOCAB), K + 1), dtype=torch.float32)
    q = torch.tensor(rng.dirichlet(np.ones(VOCAB), K), dtype=torch.float32)
    reference = rng.dirichlet(np.ones(VOCAB), K + 1)
    generator = torch.Generator().manual_seed(seed)
    emitted = np.full((n_samples, K + 1), -1)
    for n in range(n_samples):
        drafts = torch.multinomial(q, 1, generator=generator).squeeze(1)
        out = verify(drafts, q, p, generator).tolist()
        emitted[n, : len(out)] = out
    if (emitted >= VOCAB).any():
        return False, int((emitted >= 0).sum())  # an id outside the vocabulary fails at once
    target = p.numpy().astype(float)
    sizes = [s for s in SIZES if s <= n_samples]
    for position in range(K + 1):
        column = emitted[:, position]
        first = next((s for s in sizes if (column[:s] >= 0).sum() >= 10), None)
        if first is None or first == sizes[-1]:
            continue  # this position is rarely reached: too few samples to judge it
        distances = {}
        for s in (first, sizes[-1]):
            reached = column[:s][column[:s] >= 0]
            hist = np.bincount(reached, minlength=VOCAB) / len(reached)
            distances[s] = (np.linalg.norm(hist - target[position]), np.linalg.norm(hist - reference[position]))
        to_target = distances[first][0] / max(distances[sizes[-1]][0], 1e-12)
        to_reference = distances[first][1] / max(distances[sizes[-1]][1], 1e-12)
        if to_target < MULTIPLIER * to_reference:
            return False, int((emitted >= 0).sum())
    return True, int((emitted >= 0).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=SIZES[-1], help="verify calls per convergence check")
    parser.add_argument("--samplers", help="comma list (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = args.samplers.split(",") if args.samplers else list(MUTANTS)
    header = f"{'sampler':26} {'convergence: rejected':>22} {'tokens':>9} {'s':>6}   {'specaudit: rejected':>20} {'tokens':>8} {'s':>6}"
    print(header)
    print("-" * len(header))
    totals = {"conv_s": 0.0, "audit_s": 0.0}
    for name in names:
        verify = MUTANTS[name]
        conv_rejected = audit_rejected = 0
        conv_tokens = audit_tokens = 0
        conv_s = audit_s = 0.0
        for seed in range(args.seeds):
            started = time.perf_counter()
            passed, tokens = convergence_check(verify, seed, args.samples)
            conv_s += time.perf_counter() - started
            conv_rejected += not passed
            conv_tokens += tokens
            started = time.perf_counter()
            result = audit_sampler(verify, seed=seed)
            audit_s += time.perf_counter() - started
            audit_rejected += result.verdict == "fail"
            audit_tokens += result.samples
        totals["conv_s"] += conv_s
        totals["audit_s"] += audit_s
        n = args.seeds
        print(
            f"{name:26} {conv_rejected:>16}/{n:<5} {conv_tokens / n:>9.0f} {conv_s / n:>6.1f}   "
            f"{audit_rejected:>14}/{n:<5} {audit_tokens / n:>8.0f} {audit_s / n:>6.1f}",
            flush=True,
        )
    print(
        f"\nper audit, all samplers: convergence {totals['conv_s'] / args.seeds:.0f} s, specaudit {totals['audit_s'] / args.seeds:.0f} s "
        f"(ratio {totals['conv_s'] / max(totals['audit_s'], 1e-9):.1f}x); 'tokens' = emitted tokens per audit"
    )


if __name__ == "__main__":
    main()
