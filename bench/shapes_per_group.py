"""Which speculation shape serves which group (docs/trees.md, "Which shape serves which group"):
the screen's exact expectation of tokens per verification step for a chain of k drafts and for
token trees, per language (or another dimension), on one pair, and a staged run (prompt lookup →
the draft → the target) measured by running the staged engine, with each shape's step cost
measured on this machine and the speed-up it predicts.

    python bench/shapes_per_group.py --target ~/.cache/specaudit/hf/qwen2.5-coder-1.5b \
        --draft ~/.cache/specaudit/hf/qwen2.5-coder-0.5b --per-group 2 --max-new-tokens 24 --out shapes.csv

The screen samples target paths once per prompt (the seeds of an audit's plan) and evaluates
the draft along them by teacher forcing; for a tree it computes the tree's expected counts along
the same paths exactly (stats.shape_screen). So chain and trees are compared on the same
paths, with no engine noise; the per-group intervals are the prompt bootstrap's (95%).

A staged step's outer level (the draft's chain of k checked by the target) has the chain's law,
so its tokens per step are the chain's in expectation; what staging changes is the draft's cost:
prompt lookup proposes `--staged-k-small` tokens a round to the draft, which verifies them in
one pass, so the draft runs fewer passes per step where the lookup finds repeats. That inner
level has no path-conditional form (stats.shape_screen), so it is measured: the staged engine
(decoding.staged) decodes every prompt with the plan's seed, and its draft passes per step are
counted (each inner round is one draft pass: proposed − accepted at the inner level).

Costs, in units of one plain target decoding step (one token after a cached prefix; each width
the median of `--repeats` rounds, every width once a round): a draft pass over w tokens, c(w); the
target's pass over n tokens, v(n). On a CPU these are not monotone in w (matrix kernels favour
some widths), so each width a shape needs is timed, none interpolated but the staged mean.
A chain step costs k·c(1) + v(k + 1); a staged step r·c(w) + v(k + 1), with r the draft passes
per step and w their mean width (1 + the lookup's proposals; c interpolated between the widths
timed), both measured per group; a tree step Σ_d c(nodes at depth d − 1) + v(1 + nodes), timed
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


def _pass_costs(models: dict, widths: dict[str, set[int]], prefix_ids: list[int], repeats: int) -> dict[str, dict[int, float]]:
    """Median wall seconds of one forward pass over w new tokens after a cached prefix (logits for
    all w), per model and width. Timed in interleaved rounds, each (model, width) once a round after
    one untimed round, so a drift in the machine's speed falls on every width alike."""
    import torch
    from transformers import DynamicCache

    from specaudit.decoding.speculative import crop_cache
    from specaudit.models import forward_cached

    caches, times = {}, {(name, w): [] for name, ws in widths.items() for w in ws}
    with torch.inference_mode():
        for name, model in models.items():
            caches[name] = DynamicCache()
            forward_cached(model, torch.tensor([prefix_ids]), caches[name])
        length = len(prefix_ids)
        for round_ in range(repeats + 1):
            for name, w in times:
                feed = torch.tensor([(prefix_ids * (w // len(prefix_ids) + 1))[-w:]])
                started = time.perf_counter()
                forward_cached(models[name], feed, caches[name], logits_to_keep=w)
                if round_:
                    times[(name, w)].append(time.perf_counter() - started)
                crop_cache(caches[name], length)  # back to the prefix
    costs: dict[str, dict[int, float]] = {name: {} for name in widths}
    for (name, w), seconds in times.items():
        costs[name][w] = statistics.median(seconds)
    return costs


def _bootstrap(numerators: np.ndarray, denominators: np.ndarray, rng: np.random.Generator, draws: int = 2000) -> tuple[float, float]:
    idx = rng.integers(0, len(numerators), size=(draws, len(numerators)))
    ratios = numerators[idx].sum(axis=1) / denominators[idx].sum(axis=1)
    low, high = np.quantile(ratios, [0.025, 0.975])
    return float(low), float(high)


def _check_staged(frame: pd.DataFrame, chain_name: str, staged_name: str, rng: np.random.Generator, draws: int = 2000) -> None:
    """The staged engine's tokens per step against the chain's expectation, pooled over prompts, with
    the paired prompt bootstrap's interval of the difference: the outer level's law is the chain's,
    so a correct engine's difference interval covers 0 (its paths are its own samples, not the screen's)."""
    by_prompt = frame.pivot_table(index="prompt", columns="shape", values=["tokens", "steps"], aggfunc="sum")
    tokens, steps = by_prompt["tokens"], by_prompt["steps"]
    idx = rng.integers(0, len(by_prompt), size=(draws, len(by_prompt)))

    def pooled(shape: str) -> np.ndarray:
        return tokens[shape].to_numpy()[idx].sum(axis=1) / steps[shape].to_numpy()[idx].sum(axis=1)

    engine, chain = pooled(staged_name), pooled(chain_name)
    point = lambda shape: tokens[shape].sum() / steps[shape].sum()  # noqa: E731
    low, high = np.quantile(engine - chain, [0.025, 0.975])
    print(
        f"staged engine {point(staged_name):.3f} tokens per step against the chain's expectation {point(chain_name):.3f} "
        f"(pooled over {len(by_prompt)} prompts): difference {point(staged_name) - point(chain_name):+.3f} [{low:+.3f}, {high:+.3f}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--dimension", default="language")
    parser.add_argument("--per-group", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--k", type=int, default=3, help="the chain's drafts per step (default 3: the trees' depth)")
    parser.add_argument("--trees", default="2,2,1;3,2,1", help="tree shapes, ';'-separated")
    parser.add_argument(
        "--staged-k-small", type=int, default=2, help="prompt lookup's tokens per round in the staged run (0: no staged run)"
    )
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds of every pass width (the median is kept)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", help="CSV of the per-group table")
    args = parser.parse_args()

    import torch

    from specaudit.decoding import SamplingSpec
    from specaudit.decoding._shapes import parse_branching
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
    trees = [parse_branching(text) for text in args.trees.split(";")]

    chain_name, staged_name = f"chain k={args.k}", f"staged lookup:{args.staged_k_small} -> draft:{args.k}"
    rows = []  # one per (prompt, shape): tokens, steps; the staged run's draft passes and lookup counts
    for number, tree in enumerate(trees):
        paths = screen_paths(pair.target, pair.draft, encoded, seeds, tree=(tree, "sampled"), check_draft=number == 0, **common)
        for prompt, path in zip(prompts, paths, strict=True):
            group = prompt.attributes[args.dimension]
            if number == 0:  # the chain's counts come with every call, along the same paths
                rows.append(dict(prompt=prompt.id, group=group, shape=chain_name, tokens=len(path.tokens), steps=path.acceptance.steps))
            rows.append(
                dict(
                    prompt=prompt.id, group=group, shape=f"tree {','.join(map(str, tree))}", tokens=path.tree.tokens, steps=path.tree.steps
                )
            )
        print(f"screened tree {tree}: {time.perf_counter() - started:.0f} s wall", flush=True)
    if args.staged_k_small:
        from specaudit.decoding.staged import staged_generate
        from specaudit.models import NgramDraft

        for prompt, ids, seed in zip(prompts, encoded, seeds, strict=True):
            generation = staged_generate(
                pair.target,
                NgramDraft(),
                pair.draft,
                ids,
                spec=common["spec"],
                k_small=args.staged_k_small,
                k_medium=args.k,
                max_new_tokens=args.max_new_tokens,
                generator=torch.Generator().manual_seed(seed),
                eos_ids=eos,
                vocab_size=pair.vocab_size,
            )
            inner = generation.extra["levels"][0]
            rounds = generation.proposed - inner["accepted"]  # one draft pass per inner round
            group = prompt.attributes[args.dimension]
            rows.append(
                dict(
                    prompt=prompt.id,
                    group=group,
                    shape=staged_name,
                    tokens=len(generation.tokens),
                    steps=generation.steps,
                    draft_passes=rounds,
                    lookup_proposed=inner["proposed"],
                    lookup_accepted=inner["accepted"],
                )
            )
        print(f"ran the staged engine: {time.perf_counter() - started:.0f} s wall", flush=True)
    frame = pd.DataFrame(rows)

    # step costs in plain target steps, measured here: every pass width a shape needs
    tree_nodes = {tree: [int(n) for n in np.cumprod(tree)] for tree in trees}  # nodes per depth
    widths = np.arange(1, args.staged_k_small + 2)  # a staged round's draft pass: the last token + the lookup's proposals
    seconds = _pass_costs(
        {"target": pair.target, "draft": pair.draft},
        {
            "target": {1, args.k + 1, *(1 + sum(nodes) for nodes in tree_nodes.values())},
            # the draft's pass at depth d runs over the nodes of depth d - 1 (the root first)
            "draft": {1, *(int(w) for w in widths), *(w for nodes in tree_nodes.values() for w in nodes[:-1])},
        },
        encoded[0],
        args.repeats,
    )
    unit = seconds["target"][1]
    target_cost = {w: t / unit for w, t in seconds["target"].items()}
    draft_cost = {w: t / unit for w, t in seconds["draft"].items()}
    costs = {chain_name: args.k * draft_cost[1] + target_cost[args.k + 1]}
    for tree, nodes in tree_nodes.items():
        costs[f"tree {','.join(map(str, tree))}"] = sum(draft_cost[w] for w in [1, *nodes[:-1]]) + target_cost[1 + sum(nodes)]
    round_costs, outer_cost = [draft_cost[int(w)] for w in widths], target_cost[args.k + 1]
    print(f"one plain target step {unit * 1000:.1f} ms; a pass over w tokens, in plain target steps:")
    print("  target v(w):", {w: round(c, 3) for w, c in sorted(target_cost.items())})
    print("  draft c(w):", {w: round(c, 3) for w, c in sorted(draft_cost.items())})
    rng = np.random.default_rng(0)
    table = []
    for (group, shape), part in frame.groupby(["group", "shape"]):
        lookup = engine_per_step = math.nan
        if shape == staged_name:
            # tokens per step: the chain's exact expectation (the outer level has the chain's law), with its
            # interval; the engine's own count is the Monte Carlo check. The cost is priced per group.
            engine_per_step = part["tokens"].sum() / part["steps"].sum()
            passes = part["draft_passes"].sum()
            mean_width = (passes + part["lookup_proposed"].sum()) / passes
            cost = passes / part["steps"].sum() * np.interp(mean_width, widths, round_costs) + outer_cost
            lookup = part["lookup_accepted"].sum() / max(part["lookup_proposed"].sum(), 1)
            part = frame[(frame["shape"] == chain_name) & (frame["group"] == group)]
        else:
            cost = costs[shape]
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
                "step_cost": cost,
                "predicted_speedup": per_step / cost,
                "lookup_acceptance": lookup,  # staged: the draft's acceptance of the lookup's tokens
                "engine_tokens_per_step": engine_per_step,  # staged: measured by running it
            }
        )
    table = pd.DataFrame(table)
    wide = table.pivot(index="group", columns="shape", values="tokens_per_step")
    print(wide.round(2).to_string())
    print(table.pivot(index="group", columns="shape", values="step_cost").round(2).to_string())
    speedup = table.pivot(index="group", columns="shape", values="predicted_speedup")
    print(speedup.round(2).to_string())
    if args.staged_k_small:
        print("staged: the draft's acceptance of the lookup's tokens, and the engine's measured tokens per step")
        print(table[table["shape"] == staged_name].set_index("group")[["lookup_acceptance", "engine_tokens_per_step"]].round(2).to_string())
    print("best shape by tokens per step:", wide.drop(columns=staged_name, errors="ignore").idxmax(axis=1).value_counts().to_dict())
    print("best shape by predicted speed-up:", speedup.idxmax(axis=1).value_counts().to_dict())
    if args.staged_k_small:
        _check_staged(frame, chain_name, staged_name, rng)
    print(f"{len(prompts)} prompts; {time.perf_counter() - started:.0f} s wall, {time.process_time() - cpu:.0f} s CPU")
    if args.out:
        table.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
