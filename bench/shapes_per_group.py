"""Which speculation shape serves which group (docs/trees.md, "Which shape serves which group"):
the screen's exact expectation of tokens per verification step for a chain of k drafts and for
token trees, per language (or another dimension), on one pair, with each shape's step cost
measured on this machine and the speed-up it predicts.

    python bench/shapes_per_group.py --target ~/.cache/specaudit/hf/qwen2.5-coder-1.5b \
        --draft ~/.cache/specaudit/hf/qwen2.5-coder-0.5b --per-group 2 --max-new-tokens 24 --out shapes.csv

The screen samples target paths once per prompt (the seeds of an audit's plan) and evaluates
the draft along them by teacher forcing; for a tree it computes the tree's expected counts along
the same paths exactly (stats.shape_screen). So chain and trees are compared on the same
paths, with no engine noise; the per-group intervals are the prompt bootstrap's (95%).

Costs, in units of one plain target decoding step (one token after a cached prefix, median of
`--repeats` timed calls): a draft pass over w tokens, c(w); the target's pass over n tokens, v(n).
A chain step costs k·c(1) + v(k + 1); a tree step Σ_d c(nodes at depth d − 1) + v(1 + nodes), timed
as plain passes over that many tokens (the tree's attention mask does not change the work); the predicted
speed-up is tokens per step over that cost (the prompt pass left out, as in stats.cost_model).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import pandas as pd


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(","))


def _pass_seconds(model, prefix_ids: list[int], n: int, repeats: int) -> float:
    """Median wall seconds of one forward pass over n new tokens after a cached prefix."""
    import torch
    from transformers import DynamicCache

    with torch.inference_mode():
        cache = DynamicCache()
        model(input_ids=torch.tensor([prefix_ids]), past_key_values=cache, use_cache=True)
        length = cache.get_seq_length()
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            model(
                input_ids=torch.tensor([prefix_ids[-n:] if n <= len(prefix_ids) else prefix_ids[:1] * n]),
                past_key_values=cache,
                use_cache=True,
            )
            times.append(time.perf_counter() - started)
            cache.crop(-(cache.get_seq_length() - length))  # back to the prefix
    return statistics.median(times)


def _bootstrap(numerators: np.ndarray, denominators: np.ndarray, rng: np.random.Generator, draws: int = 2000) -> tuple[float, float]:
    idx = rng.integers(0, len(numerators), size=(draws, len(numerators)))
    ratios = numerators[idx].sum(axis=1) / denominators[idx].sum(axis=1)
    low, high = np.quantile(ratios, [0.025, 0.975])
    return float(low), float(high)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--dimension", default="language")
    parser.add_argument("--per-group", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--k", type=int, default=3, help="the chain's drafts per step (default 3: the trees' depth)")
    parser.add_argument("--trees", default="2,2,1;3,2,1", help="tree shapes, ';'-separated")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per cost")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", help="CSV of the per-group table")
    args = parser.parse_args()

    import torch

    from specaudit.decoding import SamplingSpec
    from specaudit.engines.decode import eos_token_ids, pad_token_id
    from specaudit.engines.screen import screen_paths
    from specaudit.execution.plan import derive_seed
    from specaudit.models import load_pair
    from specaudit.prompts import load_prompts, prompt_token_ids

    torch.set_num_threads(args.threads)
    started, cpu = time.perf_counter(), time.process_time()
    pair = load_pair(args.target, args.draft, device="cpu", dtype="float32")
    prompts = load_prompts("core", dimensions=[args.dimension], per_group=args.per_group, seed=0).prompts
    encoded = [prompt_token_ids(pair.tokenizer, p) for p in prompts]
    seeds = [derive_seed(0, p.id, 0) for p in prompts]
    eos = eos_token_ids(pair)
    common = dict(
        spec=SamplingSpec(1.0),
        k=args.k,
        max_new_tokens=args.max_new_tokens,
        eos_ids=eos,
        vocab_size=pair.vocab_size,
        pad_id=pad_token_id(pair, eos),
        batch_size=4,
    )
    trees = [_shape(text) for text in args.trees.split(";")]

    rows = []  # one per (prompt, shape): [tokens, steps]
    for number, tree in enumerate(trees):
        paths = screen_paths(pair.target, pair.draft, encoded, seeds, tree=(tree, "sampled"), check_draft=number == 0, **common)
        for prompt, path in zip(prompts, paths, strict=True):
            group = prompt.attributes[args.dimension]
            if number == 0:  # the chain's counts come with every call, along the same paths
                rows.append((prompt.id, group, f"chain k={args.k}", len(path.tokens), path.acceptance.steps))
            rows.append((prompt.id, group, f"tree {','.join(map(str, tree))}", path.tree.tokens, path.tree.steps))
        print(f"screened tree {tree}: {time.perf_counter() - started:.0f} s wall", flush=True)
    frame = pd.DataFrame(rows, columns=["prompt", "group", "shape", "tokens", "steps"])

    # step costs in plain target steps, measured here
    prefix = encoded[0]
    unit = _pass_seconds(pair.target, prefix, 1, args.repeats)

    def target_cost(n: int) -> float:
        return _pass_seconds(pair.target, prefix, n, args.repeats) / unit

    def draft_cost(n: int) -> float:
        return _pass_seconds(pair.draft, prefix, n, args.repeats) / unit

    costs = {f"chain k={args.k}": args.k * draft_cost(1) + target_cost(args.k + 1)}
    for tree in trees:
        nodes = [int(n) for n in np.cumprod(tree)]  # tree nodes per depth
        # the draft's pass at depth d runs over the nodes of depth d - 1 (the root first); the target verifies root + nodes
        costs[f"tree {','.join(map(str, tree))}"] = sum(draft_cost(w) for w in [1, *nodes[:-1]]) + target_cost(1 + sum(nodes))
    rng = np.random.default_rng(0)
    table = []
    for (group, shape), part in frame.groupby(["group", "shape"]):
        tokens, steps = part["tokens"].to_numpy(float), part["steps"].to_numpy(float)
        per_step = tokens.sum() / steps.sum()
        low, high = _bootstrap(tokens, steps, rng) if len(part) > 1 else (math.nan, math.nan)
        table.append(
            {
                "group": group,
                "shape": shape,
                "prompts": len(part),
                "tokens_per_step": per_step,
                "low": low,
                "high": high,
                "step_cost": costs[shape],
                "predicted_speedup": per_step / costs[shape],
            }
        )
    table = pd.DataFrame(table)
    wide = table.pivot(index="group", columns="shape", values="tokens_per_step")
    print(wide.round(2).to_string())
    print("step cost (plain target steps):", {name: round(value, 2) for name, value in costs.items()})
    print(table.pivot(index="group", columns="shape", values="predicted_speedup").round(2).to_string())
    best = wide.idxmax(axis=1)
    print("best shape by tokens per step:", best.value_counts().to_dict())
    print(f"{len(prompts)} prompts; {time.perf_counter() - started:.0f} s wall, {time.process_time() - cpu:.0f} s CPU")
    if args.out:
        table.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
