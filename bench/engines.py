"""Engine throughput on the default pair, measured side by side in one run.

    python bench/engines.py [--prompts 8] [--max-new-tokens 64] [--k 4] [--repeats 2] [--device auto]

Each prompt is decoded by vanilla, speculative (ours) and hf-assisted in rotating order, after a
warm-up, so drift of a noisy machine lands on all three alike. Prints tokens/s per engine, the
ratios speculative/vanilla and speculative/hf-assisted, the acceptance rate, and the draft/target
cost ratio c measured on single cached decoding steps. Ratios are the result; absolute tokens/s
drift between machines and runs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import DynamicCache

from specaudit.config import RunConfig
from specaudit.models import Stopwatch, forward_cached, load_pair
from specaudit.prompts import load_prompts, prompt_token_ids
from specaudit.runner import eos_token_ids, generate_one


def step_cost(model, prompt_ids, device, steps=40) -> float:
    """Median seconds of one cached single-token forward step."""
    clock = Stopwatch(device)
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        forward_cached(model, torch.tensor([prompt_ids], device=device), cache)
        token = torch.tensor([[prompt_ids[-1]]], device=device)
        times = []
        for _ in range(steps):
            start = clock.now()
            forward_cached(model, token, cache)
            times.append(clock.now() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="default")
    parser.add_argument("--draft", default="int8")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch (as `specaudit run --threads`)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    cfg = RunConfig(target=args.target, draft=args.draft, engines=("vanilla", "speculative", "hf-assisted"), k=args.k,
                    temperature=args.temperature, max_new_tokens=args.max_new_tokens, device=args.device, dtype=args.dtype)
    pair = load_pair(cfg.target, cfg.draft, device=cfg.device, dtype=cfg.dtype)
    prompts = load_prompts("core", dimensions=["domain"], per_group=max(1, args.prompts // 8) if args.prompts >= 8 else 1, seed=0).prompts[: args.prompts]
    eos = eos_token_ids(pair)
    encoded = [prompt_token_ids(pair.tokenizer, p) for p in prompts]
    verify = cfg.load_verify()
    for engine in cfg.engines:  # warm-up
        generate_one(engine, pair, encoded[0], cfg, 0, verify, eos, 8)

    totals = {engine: {"tokens": 0, "seconds": 0.0, "proposed": 0, "accepted": 0} for engine in cfg.engines}
    started = time.perf_counter()
    for repeat in range(args.repeats):
        for index, ids in enumerate(encoded):
            shift = (index + repeat) % len(cfg.engines)
            for engine in cfg.engines[shift:] + cfg.engines[:shift]:
                out = generate_one(engine, pair, ids, cfg, 1000 * repeat + index, verify, eos, cfg.max_new_tokens)
                totals[engine]["tokens"] += len(out.tokens)
                totals[engine]["seconds"] += out.wall_s
                totals[engine]["proposed"] += out.proposed
                totals[engine]["accepted"] += out.accepted
    draft_cost = step_cost(pair.draft, encoded[0], pair.device) if pair.draft_is_model else 0.0
    target_cost = step_cost(pair.target, encoded[0], pair.device)

    rate = {e: t["tokens"] / t["seconds"] for e, t in totals.items()}
    print(f"pair: target={cfg.target} draft={cfg.draft} device={pair.device} dtype={pair.dtype} k={cfg.k} T={cfg.temperature}")
    print(f"workload: {len(encoded)} prompts x {args.repeats} repeats, max {cfg.max_new_tokens} new tokens, {time.perf_counter() - started:.0f} s")
    for engine, t in totals.items():
        acceptance = f"  acceptance {t['accepted'] / t['proposed']:.3f}" if t["proposed"] else ""
        print(f"{engine:>12}: {rate[engine]:7.1f} tokens/s  ({t['tokens']} tokens in {t['seconds']:.1f} s){acceptance}")
    print(f"ratio speculative/vanilla:     {rate['speculative'] / rate['vanilla']:.3f}")
    print(f"ratio speculative/hf-assisted: {rate['speculative'] / rate['hf-assisted']:.3f}")
    print(f"cost ratio c (draft step / target step): {draft_cost / target_cost:.3f}")


if __name__ == "__main__":
    main()
