"""False-alarm rate of the vanilla control on the real default pair, over many seeds.

    python bench/control_calibration.py [--audits 100] [--prompts 12] [--new-tokens 32] [--batch 48]

Each simulated audit draws `--prompts` prompts of the core set at random, samples their
continuations from the target itself (SmolLM2-135M-Instruct, float32 or --dtype, T = 1, no top-k/top-p:
exactly the distribution the control claims), scores them as `specaudit analyze` does (teacher
forcing of the target and of the weight-only int8 self-draft, with the Monte Carlo nulls of the
surprisal and draft-affinity statistics), and runs the goodness-of-fit battery on them at alpha:
PIT, surprisal and draft affinity under Holm, the battery analyze judges the control by. Every
rejection is a false alarm ("warn" at alpha; "fail" at the control level alpha x 0.02). Target
sampling is batched (left-padded, KV-cached `generate`); audits continue until `--audits` are done
or the CPU budget is spent. Prints the false-alarm rate of the battery and of each test with
Clopper-Pearson 95% intervals, beside the binomial 95% interval of alpha over as many audits, and
the rates the surprisal and draft-affinity tests would have with their normal approximation.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
from scipy.stats import binom, binomtest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specaudit import load_pair
from specaudit.analysis.equivalence import CONTROL_ALPHA_FACTOR
from specaudit.decoding.call_invariance import draft_batch_invariance
from specaudit.engines.decode import eos_token_ids
from specaudit.prompts import load_prompts, prompt_token_ids
from specaudit.stats.equivalence import draft_affinity, goodness_of_fit, surprisal_martingale
from specaudit.stats.scoring import score_records

TESTS = ("pit", "surprisal", "draft_affinity")


def _interval(hits: int, n: int) -> str:
    if not n:
        return "n/a"
    ci = binomtest(hits, n).proportion_ci(0.95)
    return f"{hits}/{n} = {hits / n:.3f} [{ci.low:.3f}, {ci.high:.3f}]"


def _sample(pair, prompt_ids: list[list[int]], new_tokens: int, seed: int, eos: set[int]) -> list[list[int]]:
    """Continuations drawn from the warping-free target, one per prompt, in one batch."""
    width = max(len(p) for p in prompt_ids)
    pad = pair.tokenizer.pad_token_id if pair.tokenizer.pad_token_id is not None else min(eos)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompt_ids])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids])
    torch.manual_seed(seed)
    with torch.no_grad():
        out = pair.target.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=new_tokens,
            pad_token_id=pad,
            eos_token_id=sorted(eos),
        )
    continuations = []
    for row in out[:, width:].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))  # up to and including EOS
        continuations.append(row[:cut])
    return continuations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audits", type=int, default=100, help="simulated audits (seeds) to run (default 100)")
    parser.add_argument("--budget-s", type=float, default=3600.0, help="stop earlier once this many CPU seconds are spent")
    parser.add_argument("--prompts", type=int, default=12, help="prompts per simulated audit (default 12)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--batch", type=int, default=48, help="sequences sampled per generate call")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--dtype", default="float32", help="float32 (the CPU default) or bfloat16 (sampling and scoring differ by its rounding)"
    )
    parser.add_argument("--json", type=Path, help="also write the per-audit results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    pair = load_pair("default", "int8", dtype=args.dtype)
    eos = eos_token_ids(pair)
    core = load_prompts("core").prompts
    encoded = {p.id: prompt_token_ids(pair.tokenizer, p) for p in core}
    audits_per_batch = max(1, args.batch // args.prompts)
    started, wall_started = time.process_time(), time.perf_counter()
    results: list[dict] = []
    invariance = None
    seed = 0
    while seed < args.audits and time.process_time() - started < args.budget_s:
        plan = []
        for _ in range(min(audits_per_batch, args.audits - seed)):
            rng = random.Random(seed)
            plan.append((seed, rng.sample(core, args.prompts)))
            seed += 1
        flat = [(audit, p) for audit, prompts in plan for p in prompts]
        outputs = _sample(pair, [encoded[p.id] for _, p in flat], args.new_tokens, plan[0][0], eos)
        records = [
            {
                "key": f"a{audit}:{p.id}|vanilla|0",
                "prompt_id": f"a{audit}:{p.id}",
                "engine": "vanilla",
                "sample": 0,
                "sampling": {"temperature": 1.0, "top_k": 0, "top_p": 1.0},
                "attributes": dict(p.attributes),
                "prompt_token_ids": encoded[p.id],
                "output_token_ids": out,
            }
            for (audit, p), out in zip(flat, outputs)
            if out
        ]
        if invariance is None:
            # analyze scores the draft only where teacher forcing reproduces the q of step-by-step
            # decoding (it checks a speculative record; any sampled sequence serves here).
            invariance = draft_batch_invariance(pair, [dict(r, engine="speculative") for r in records])
            if not invariance.get("batch_invariant"):
                sys.exit(f"the draft is not call-invariant (TV {invariance.get('max_tv')}): analyze would skip draft affinity")
        scores = score_records(pair.target, records, draft_model=pair.draft, batch_size=16)
        for audit, prompts in plan:
            members = {f"a{audit}:{p.id}" for p in prompts}
            mine = scores.select(prompt_ids=members)
            gof = goodness_of_fit(
                mine, [r for r in records if r["prompt_id"] in members], engine="vanilla", by=[], alpha=args.alpha, seed=audit
            )
            results.append(
                {
                    "seed": audit,
                    "n_tokens": gof.n_tokens,
                    "holm_pvalue": gof.pvalue,
                    "pvalues": {name: test.pvalue for name, test in gof.tests.items()},
                    "z": {name: gof.tests[name].statistic for name in ("surprisal", "draft_affinity")},
                    # the old normal approximations, for comparison
                    "normal_pvalues": {
                        "surprisal": surprisal_martingale(mine.tokens, alpha=args.alpha).pvalue,
                        "draft_affinity": draft_affinity(mine.tokens, alpha=args.alpha).pvalue,
                    },
                }
            )
        # after every batch: a cut-short run still reports
        _report(results, args, time.process_time() - started, time.perf_counter() - wall_started, invariance)


def _report(results: list[dict], args: argparse.Namespace, cpu_s: float, wall_s: float, invariance: dict) -> None:
    n = len(results)
    low, high = (x / n for x in binom.interval(0.95, n, args.alpha))
    control_alpha = args.alpha * CONTROL_ALPHA_FACTOR
    lines = [
        (
            f"vanilla control, default pair (int8 draft, teacher-forced q vs decoding TV {invariance['max_tv']:.1e}), "
            f"{args.prompts} prompts x {args.new_tokens} tokens per audit, alpha = {args.alpha}, {n} audits in "
            f"{cpu_s:.0f} CPU s / {wall_s:.0f} s wall, {args.threads} thread(s) "
            f"(mean {sum(r['n_tokens'] for r in results) / max(n, 1):.0f} tokens per audit)"
        ),
        f"binomial 95% interval of alpha over {n} audits: [{low:.3f}, {high:.3f}]",
        f"battery (Holm over {', '.join(TESTS)}) rejects at alpha: " + _interval(sum(r["holm_pvalue"] < args.alpha for r in results), n),
        f"  at the control level {control_alpha:g} (a control 'fail'): "
        + _interval(sum(r["holm_pvalue"] < control_alpha for r in results), n),
    ]
    for name in TESTS:
        lines.append(f"  {name} (unadjusted): " + _interval(sum(r["pvalues"].get(name, 1.0) < args.alpha for r in results), n))
    for name in ("surprisal", "draft_affinity"):
        lines.append(
            f"  {name} with the normal approximation: " + _interval(sum(r["normal_pvalues"][name] < args.alpha for r in results), n)
        )
    print("\n".join(lines), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
