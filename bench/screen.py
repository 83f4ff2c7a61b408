"""The screen against today's engine path, side by side in one run, on the real default pair.

    PYTHONPATH=. python bench/screen.py [--per-group 8] [--max-new-tokens 24] [--int8-options]

Prints (single thread; wall seconds and CPU seconds, the latter robust to a busy machine):
1. batch-1 vs batched target sampling, tokens per CPU second;
2. prompts with an acceptance estimate per minute: the screen vs the engines (vanilla +
   speculative per prompt, batch 1, as `specaudit run` does today);
3. per-group acceptance (accepted / proposed) from the screen and from the speculative engine on
   the same prompts, for the int8 draft and for ngram, with the ratio's 95% prompt-bootstrap
   interval (it should cover 1);
4. with --int8-options: the int8 derivations measured (call-invariance TV, mean beta, cost ratio c).
"""

from __future__ import annotations

import argparse
import copy
import time
import warnings

import numpy as np
import torch

from specaudit.decoding import (
    SamplingSpec,
    speculative_generate,
    vanilla_generate,
    warp,
)
from specaudit.engines.batched_sampling import sample_batch, teacher_forced_probs
from specaudit.engines.decode import eos_token_ids
from specaudit.engines.screen import screen_paths
from specaudit.execution.plan import derive_seed
from specaudit.models import NgramDraft, forward_cached, load_pair
from specaudit.prompts import load_prompts, prompt_token_ids
from specaudit.stats._bootstrap import cluster_bootstrap


class Clock:
    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def pick_prompts(per_group: int, dimension: str):
    prompt_set = load_prompts("core")
    groups = sorted({p.attributes[dimension] for p in prompt_set.prompts if dimension in p.attributes})[:2]
    chosen = [p for g in groups for p in [q for q in prompt_set.prompts if q.attributes.get(dimension) == g][:per_group]]
    return chosen, groups


def ratio_interval(groups_of, screen_acc, screen_prop, engine_acc, engine_prop, group):
    members = np.flatnonzero(groups_of == group)
    sa, sp, ea, ep = (np.asarray(x, dtype=float)[members] for x in (screen_acc, screen_prop, engine_acc, engine_prop))

    def ratio(w):
        return (w @ sa / (w @ sp)) / (w @ ea / (w @ ep))

    result = cluster_bootstrap(ratio, len(members), n_boot=2000, seed=0)
    return sa.sum() / sp.sum(), ea.sum() / ep.sum(), result.statistic, result.ci_low, result.ci_high


def int8_options(pair, prompts, spec, eos_ids):
    """Dynamic per-tensor int8 (torch), per-token activation scales (exact int8 GEMM per row),
    weight-only int8 (float activations): call-invariance, acceptance, cost ratio."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    from specaudit.models import int8_draft

    class PerTokenScales(torch.nn.Module):
        """Each row scaled to max |x| = 1 before torch's per-call quantiser, and a sentinel row
        [1, -1, 0...] fixes the call's range, so every row is quantised with its own scale."""

        def __init__(self, linear):
            super().__init__()
            self.linear = linear
            self.register_buffer("sentinel", torch.zeros(1, linear.in_features))
            self.sentinel[0, 0], self.sentinel[0, 1] = 1.0, -1.0

        def forward(self, x):
            flat = x.reshape(-1, x.shape[-1])
            scale = flat.abs().amax(-1, keepdim=True).clamp_min(1e-30)
            return (self.linear(torch.cat([flat / scale, self.sentinel]))[:-1] * scale).reshape(*x.shape[:-1], -1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dynamic = quantize_dynamic(copy.deepcopy(pair.target), {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8).eval()
        per_token = quantize_dynamic(copy.deepcopy(pair.target), {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8).eval()
    for module in list(per_token.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, DynamicLinear):
                setattr(module, name, PerTokenScales(child))
    vocab = pair.vocab_size
    batch = sample_batch(
        pair.target,
        prompts,
        list(range(len(prompts))),
        spec=spec,
        max_new_tokens=24,
        eos_ids=eos_ids,
        vocab_size=vocab,
        pad_id=min(eos_ids),
        keep_probs=True,
    )

    def stepwise_q(model, prompt, path):
        cache = DynamicCache(config=model.config)
        rows = [forward_cached(model, torch.tensor([prompt]), cache)[0, -1]]
        rows += [forward_cached(model, torch.tensor([[t]]), cache)[0, -1] for t in path[:-1]]
        return warp(torch.stack(rows)[:, :vocab], spec)

    def step_seconds(model, n=12):
        cache = DynamicCache(config=model.config)
        forward_cached(model, torch.tensor([prompts[0]]), cache)
        with Clock() as clock:
            for i in range(n):
                forward_cached(model, torch.tensor([[100 + i]]), cache)
        return clock.cpu / n

    from transformers import DynamicCache

    with torch.inference_mode():
        target_s = min(step_seconds(pair.target) for _ in range(3))
        for name, draft in (
            ("dynamic int8 (per-call scale)", dynamic),
            ("int8, per-token scales", per_token),
            ("weight-only int8 (default)", int8_draft(pair.target)),
        ):
            q = teacher_forced_probs(draft, batch, spec=spec, vocab_size=vocab)
            tv, betas = 0.0, []
            for row, prompt in enumerate(prompts):
                n = len(batch.tokens[row])
                stepwise = stepwise_q(draft, prompt, batch.tokens[row])
                tv = max(tv, float((0.5 * (stepwise - q[row, :n]).abs().sum(-1)).max()))
                betas.append(torch.minimum(batch.probs[row, :n].double(), stepwise.double()).sum(-1))
            cost = min(step_seconds(draft) for _ in range(3)) / target_s
            print(
                f"  {name:32s} TV(teacher-forced, step-by-step) {tv:.2g}   mean beta at decode time {float(torch.cat(betas).mean()):.3f}"
                f"   c = {cost:.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-group", type=int, default=8)
    parser.add_argument("--dimension", default="language")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--screen-samples", type=int, default=4)
    parser.add_argument("--int8-options", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec = SamplingSpec(1.0)
    pair = load_pair("default", "int8", device="cpu")
    eos_ids, pad_id, vocab = eos_token_ids(pair), min(eos_token_ids(pair)), pair.vocab_size
    chosen, groups = pick_prompts(args.per_group, args.dimension)
    prompts = [prompt_token_ids(pair.tokenizer, p) for p in chosen]
    groups_of = np.array([p.attributes[args.dimension] for p in chosen])
    budget = args.max_new_tokens
    print(
        f"default pair, T = 1, k = {args.k}, {budget} new tokens, {len(chosen)} core prompts ({args.dimension}: {', '.join(groups)}), 1 thread"
    )

    # 1. batch-1 vs batched target sampling
    seeds = [derive_seed(0, p.id, 0) for p in chosen]
    with Clock() as one:
        single = [
            sample_batch(pair.target, [ids], [s], spec=spec, max_new_tokens=budget, eos_ids=eos_ids, vocab_size=vocab, pad_id=pad_id)
            for ids, s in zip(prompts, seeds)
        ]
    with Clock() as many:
        batched = sample_batch(
            pair.target, prompts, seeds, spec=spec, max_new_tokens=budget, eos_ids=eos_ids, vocab_size=vocab, pad_id=pad_id
        )
    n_one, n_many = sum(len(b.tokens[0]) for b in single), sum(len(t) for t in batched.tokens)
    same = sum(b.tokens[0] == t for b, t in zip(single, batched.tokens))
    print("\n1. target sampling, tokens per second (CPU s / wall s)")
    print(f"  batch 1:  {n_one / one.cpu:6.1f} / {n_one / one.wall:6.1f}")
    print(
        f"  batch {len(prompts)}: {n_many / many.cpu:6.1f} / {n_many / many.wall:6.1f}   ({n_many / many.cpu / (n_one / one.cpu):.1f}x per CPU s); "
        f"{same}/{len(prompts)} rows identical to batch 1"
    )

    # 2 + 3. screen vs engines on the same prompts
    print("\n2./3. screen vs engine, per draft")
    for draft_name, draft in (("int8", pair.draft), ("ngram", NgramDraft())):
        rows_prompts = [ids for ids in prompts for _ in range(args.screen_samples)]
        rows_seeds = [derive_seed(0, p.id, s) for p in chosen for s in range(args.screen_samples)]
        with Clock() as screen_clock:
            paths = screen_paths(
                pair.target,
                draft,
                rows_prompts,
                rows_seeds,
                spec=spec,
                k=args.k,
                max_new_tokens=budget,
                eos_ids=eos_ids,
                vocab_size=vocab,
                pad_id=pad_id,
                batch_size=32,
            )
        screen_acc = np.array([r.acceptance.accepted for r in paths]).reshape(len(chosen), -1).sum(1)
        screen_prop = np.array([r.acceptance.proposed for r in paths]).reshape(len(chosen), -1).sum(1)
        engine_acc, engine_prop, vanilla_clock, spec_clock = [], [], Clock(), Clock()
        vanilla_clock.cpu = vanilla_clock.wall = spec_clock.cpu = spec_clock.wall = 0.0
        for p, ids in zip(chosen, prompts):
            seed = derive_seed(0, p.id, 0)
            with Clock() as c:
                vanilla_generate(
                    pair.target,
                    ids,
                    spec=spec,
                    max_new_tokens=budget,
                    generator=torch.Generator().manual_seed(seed),
                    eos_ids=eos_ids,
                    vocab_size=vocab,
                )
            vanilla_clock.cpu += c.cpu
            vanilla_clock.wall += c.wall
            with Clock() as c:
                g = speculative_generate(
                    pair.target,
                    draft,
                    ids,
                    spec=spec,
                    k=args.k,
                    max_new_tokens=budget,
                    generator=torch.Generator().manual_seed(seed),
                    eos_ids=eos_ids,
                    vocab_size=vocab,
                )
            spec_clock.cpu += c.cpu
            spec_clock.wall += c.wall
            engine_acc.append(g.accepted)
            engine_prop.append(g.proposed)
        screen_cpu_per_prompt = screen_clock.cpu / len(paths)
        engine_cpu_per_prompt = (vanilla_clock.cpu + spec_clock.cpu) / len(chosen)
        print(
            f"  {draft_name}: prompts with an acceptance estimate per CPU minute: screen {60 / screen_cpu_per_prompt:.1f}, "
            f"engines (vanilla + speculative) {60 / engine_cpu_per_prompt:.1f} ({engine_cpu_per_prompt / screen_cpu_per_prompt:.1f}x); "
            f"wall: screen {screen_clock.wall / len(paths):.2f} s, engines {(vanilla_clock.wall + spec_clock.wall) / len(chosen):.2f} s per prompt"
        )
        for group in groups:
            s, e, r, low, high = ratio_interval(groups_of, screen_acc, screen_prop, engine_acc, engine_prop, group)
            print(
                f"    {args.dimension}={group}: acceptance screen {s:.3f} ({args.screen_samples} paths/prompt), engine {e:.3f} (1 run/prompt); "
                f"ratio {r:.3f} [{low:.3f}, {high:.3f}] {'covers 1' if low <= 1 <= high else 'DOES NOT cover 1'}"
            )

    if args.int8_options:
        print("\n4. int8 derivations of the default target (first 4 prompts)")
        int8_options(pair, prompts[:4], spec, eos_ids)


if __name__ == "__main__":
    main()
