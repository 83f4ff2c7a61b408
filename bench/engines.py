"""Engine throughput on the default pair, measured side by side in one run.

    python bench/engines.py [--prompts 8] [--max-new-tokens 64] [--k 4] [--repeats 2] [--device auto] [--llama-cpp]

Each prompt is decoded by vanilla, speculative (ours) and hf-assisted in rotating order, after a
warm-up, so drift of a noisy machine lands on all three alike. `--llama-cpp` adds llama.cpp's
vanilla and speculative decoding (specaudit.engines.llama_cpp_runtime: the embedded GGUF as it is, draft
`--llama-draft`, default prompt lookup, same k, prompts, seeds and thread count) to the rotation. Prints tokens/s per engine, the
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
from specaudit.engines.decode import eos_token_ids, generate_one
from specaudit.models import Stopwatch, forward_cached, load_pair
from specaudit.prompts import load_prompts, prompt_token_ids


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
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch (as `specaudit run --threads`) and llama.cpp")
    parser.add_argument("--llama-cpp", action="store_true", help="add llama.cpp vanilla and speculative (needs specaudit[llama-cpp])")
    parser.add_argument("--llama-draft", default="ngram", help="llama.cpp's draft: ngram (prompt lookup) or a GGUF file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    cfg = RunConfig(
        target=args.target,
        draft=args.draft,
        engines=("vanilla", "speculative", "hf-assisted"),
        k=args.k,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        device=args.device,
        dtype=args.dtype,
    )
    pair = load_pair(cfg.target, cfg.draft, device=cfg.device, dtype=cfg.dtype)
    prompts = load_prompts("core", dimensions=["domain"], per_group=max(1, args.prompts // 8) if args.prompts >= 8 else 1, seed=0).prompts[
        : args.prompts
    ]
    eos = eos_token_ids(pair)
    encoded = [prompt_token_ids(pair.tokenizer, p) for p in prompts]
    verify = cfg.load_verify()
    engines = list(cfg.engines)
    decode = {engine: (lambda engine, ids, seed, n: generate_one(engine, pair, ids, cfg, seed, verify, eos, n)) for engine in engines}
    if args.llama_cpp:
        from specaudit.engines import llama_cpp_runtime as llama_cpp
        from specaudit.engines.llama_cpp_settings import backend_settings

        llama_cfg = RunConfig(
            target=args.target,
            draft=args.llama_draft,
            engines="llama-cpp",
            k=args.k,
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            threads=args.threads,
        )
        llama_cpp.check_config(llama_cfg)
        llama = llama_cpp.load_engines(llama_cfg, llama_cpp.gguf_file(args.target), backend_settings(llama_cfg))
        llama.eos_ids |= eos
        sampler = llama_cpp.sampler_settings(llama_cfg.sampling)
        for engine in ("vanilla", "speculative"):
            decode[f"llama.cpp {engine}"] = lambda name, ids, seed, n: llama_cpp.generate(
                llama, name.split()[-1], ids, sampler, seed, n, args.k
            )
            engines.append(f"llama.cpp {engine}")
    for engine in engines:  # warm-up
        decode[engine](engine, encoded[0], 0, 8)

    totals = {engine: {"tokens": 0, "seconds": 0.0, "proposed": 0, "accepted": 0} for engine in engines}
    started = time.perf_counter()
    for repeat in range(args.repeats):
        for index, ids in enumerate(encoded):
            shift = (index + repeat) % len(engines)
            for engine in engines[shift:] + engines[:shift]:
                out = decode[engine](engine, ids, 1000 * repeat + index, cfg.max_new_tokens)
                totals[engine]["tokens"] += len(out.tokens)
                totals[engine]["seconds"] += out.wall_s
                totals[engine]["proposed"] += out.proposed
                totals[engine]["accepted"] += out.accepted
    draft_cost = step_cost(pair.draft, encoded[0], pair.device) if pair.draft_is_model else 0.0
    target_cost = step_cost(pair.target, encoded[0], pair.device)

    rate = {e: t["tokens"] / t["seconds"] for e, t in totals.items()}
    print(f"pair: target={cfg.target} draft={cfg.draft} device={pair.device} dtype={pair.dtype} k={cfg.k} T={cfg.temperature}")
    print(
        f"workload: {len(encoded)} prompts x {args.repeats} repeats, max {cfg.max_new_tokens} new tokens, {time.perf_counter() - started:.0f} s"
    )
    for engine, t in totals.items():
        acceptance = f"  acceptance {t['accepted'] / t['proposed']:.3f}" if t["proposed"] else ""
        print(f"{engine:>21}: {rate[engine]:7.1f} tokens/s  ({t['tokens']} tokens in {t['seconds']:.1f} s){acceptance}")
    print(f"ratio speculative/vanilla:     {rate['speculative'] / rate['vanilla']:.3f}")
    print(f"ratio speculative/hf-assisted: {rate['speculative'] / rate['hf-assisted']:.3f}")
    print(f"cost ratio c (draft step / target step): {draft_cost / target_cost:.3f}")
    if args.llama_cpp:
        print(f"llama.cpp ({args.threads} thread(s), draft {args.llama_draft}):")
        print(f"ratio llama.cpp speculative/llama.cpp vanilla: {rate['llama.cpp speculative'] / rate['llama.cpp vanilla']:.3f}")
        print(f"ratio llama.cpp vanilla/vanilla (torch):       {rate['llama.cpp vanilla'] / rate['vanilla']:.3f}")
        print(f"ratio llama.cpp speculative/speculative:       {rate['llama.cpp speculative'] / rate['speculative']:.3f}")


if __name__ == "__main__":
    main()
