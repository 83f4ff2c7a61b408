"""Peak memory and throughput of the screen, the engines and scoring: the named Qwen2.5-Coder pair
against the default pair, side by side.

    PYTHONPATH=. python bench/real_pair.py [--per-group 1] [--prompts N] [--max-new-tokens 16] [--engine-prompts 2]

Each pair runs in a fresh process that loads the models once; before each stage the kernel's
peak-RSS counter is reset (`echo 5 > /proc/self/clear_refs`), so a stage's peak RSS (VmHWM) is
its own, models included (the RSS right after loading is printed too). Prompts: the core set's
language dimension, `--per-group` per language, with the chat template. Stages:

- screen:  `screen_paths` on every prompt (one batch), k = 4; tokens/s = sampled target tokens / wall s;
- engines: specaudit's vanilla and speculative engines at batch 1 on the first `--engine-prompts`;
- scoring: `score_records` of the screen's paths under target and draft (teacher forcing, with the
  Monte Carlo nulls); tokens/s = scored tokens / wall s.

The named pair is fetched first if needed (`specaudit models fetch qwen2.5-coder`).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

PAIRS = {
    "default (SmolLM2-135M + int8)": ("default", "int8"),
    "qwen2.5-coder 1.5B + 0.5B": ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"),
}
STAGES = ("screen", "engines", "scoring")


def peak_rss() -> int:
    """VmHWM: the peak resident set since the process started or since `reset_peak_rss`."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def stages(args: argparse.Namespace) -> dict:
    """Every stage on one pair, in this process."""
    import torch

    from specaudit.decoding import SamplingSpec, speculative_generate, vanilla_generate
    from specaudit.engines.decode import eos_token_ids, pad_token_id
    from specaudit.engines.screen import screen_paths
    from specaudit.execution.plan import derive_seed
    from specaudit.models import load_pair
    from specaudit.prompts import load_prompts, prompt_token_ids
    from specaudit.stats.scoring import score_records

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    pair = load_pair(args.target, args.draft, device="cpu", dtype=args.dtype)
    loaded = {"load_s": time.perf_counter() - started, "rss_after_load": peak_rss(), "vocab": pair.vocab_size}
    prompts = load_prompts("core", dimensions=["language"], per_group=args.per_group, seed=0).prompts[: args.prompts]
    encoded = [prompt_token_ids(pair.tokenizer, p) for p in prompts]
    spec, eos = SamplingSpec(1.0), eos_token_ids(pair)
    seeds = [derive_seed(0, p.id, 0) for p in prompts]
    results: dict[str, dict] = {}
    outputs: list[list[int]] = []
    for name in STAGES:
        reset_peak_rss()
        result = dict(loaded)
        started = time.perf_counter()
        if name == "screen":
            paths = screen_paths(
                pair.target,
                pair.draft,
                encoded,
                seeds,
                spec=spec,
                k=4,
                max_new_tokens=args.max_new_tokens,
                eos_ids=eos,
                vocab_size=pair.vocab_size,
                pad_id=pad_token_id(pair, eos),
                batch_size=len(encoded),
            )
            tokens = sum(len(p.tokens) for p in paths)
            accepted, proposed = sum(p.acceptance.accepted for p in paths), sum(p.acceptance.proposed for p in paths)
            result.update(prompts=len(paths), tokens=tokens, acceptance=accepted / proposed if proposed else None)
            outputs = [p.tokens for p in paths]
        elif name == "engines":
            tokens = {"vanilla": 0, "speculative": 0}
            seconds = {"vanilla": 0.0, "speculative": 0.0}
            for ids, seed in list(zip(encoded, seeds))[: args.engine_prompts]:
                common = dict(spec=spec, max_new_tokens=args.max_new_tokens, eos_ids=eos, vocab_size=pair.vocab_size)
                for engine in ("vanilla", "speculative"):
                    generator = torch.Generator().manual_seed(seed)
                    t0 = time.perf_counter()
                    if engine == "vanilla":
                        out = vanilla_generate(pair.target, ids, generator=generator, **common)
                    else:
                        out = speculative_generate(pair.target, pair.draft, ids, k=4, generator=generator, **common)
                    seconds[engine] += time.perf_counter() - t0
                    tokens[engine] += len(out.tokens)
            result.update(
                prompts=args.engine_prompts,
                tokens=tokens["vanilla"] + tokens["speculative"],
                vanilla_tokens_per_s=tokens["vanilla"] / seconds["vanilla"],
                speculative_tokens_per_s=tokens["speculative"] / seconds["speculative"],
            )
        else:
            records = [
                {
                    "key": f"{p.id}|speculative|0",
                    "prompt_id": p.id,
                    "engine": "speculative",
                    "sample": 0,
                    "attributes": dict(p.attributes),
                    "prompt_token_ids": ids,
                    "output_token_ids": out,
                    "sampling": spec.to_dict(),
                }
                for p, ids, out in zip(prompts, encoded, outputs)
                if out
            ]
            scores = score_records(pair.target, records, spec, draft_model=pair.draft, batch_size=8)
            result.update(prompts=len(records), tokens=len(scores))
        result["stage_s"] = time.perf_counter() - started
        result["tokens_per_s"] = result["tokens"] / result["stage_s"]
        result["peak_rss"] = peak_rss()
        results[name] = result
        print(json.dumps({name: result}), file=sys.stderr, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-group", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--engine-prompts", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=None, help="keep only the first N prompts (default: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: waiting OpenMP threads crawl on a busy machine)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--pairs", default=",".join(PAIRS), help="comma-separated pair labels (default: both)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one pair, in a fresh process
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--draft", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(stages(args)))
        return
    table: dict[str, dict[str, dict]] = {}
    for label in args.pairs.split(","):
        target, draft = PAIRS[label]
        command = [sys.executable, __file__, "--child", "--target", target, "--draft", draft]
        command += ["--per-group", str(args.per_group), "--max-new-tokens", str(args.max_new_tokens)]
        command += [
            *(["--prompts", str(args.prompts)] if args.prompts else []),
            "--engine-prompts",
            str(args.engine_prompts),
            "--threads",
            str(args.threads),
            "--dtype",
            args.dtype,
        ]
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True)  # the child's stages print to stderr as they end
        if done.returncode != 0:
            sys.exit(f"{label} failed")
        table[label] = json.loads(done.stdout.strip().splitlines()[-1])
        for name in STAGES:
            print(f"{label:<32} {name:<8} {json.dumps(table[label][name])}", flush=True)
    labels = [label for label in PAIRS if label in table]  # the default first: ratios are real / default
    print(f"\n{'stage':<26}" + "".join(f"{label:>32}" for label in labels) + ("   ratio" if len(labels) == 2 else ""))
    rows = [
        ("screen peak RSS (GB)", "screen", lambda r: r["peak_rss"] / 1e9),
        ("screen RSS after load (GB)", "screen", lambda r: r["rss_after_load"] / 1e9),
        ("screen tokens/s", "screen", lambda r: r["tokens_per_s"]),
        ("screen acceptance (E)", "screen", lambda r: r["acceptance"]),
        ("engines peak RSS (GB)", "engines", lambda r: r["peak_rss"] / 1e9),
        ("vanilla tokens/s", "engines", lambda r: r["vanilla_tokens_per_s"]),
        ("speculative tokens/s", "engines", lambda r: r["speculative_tokens_per_s"]),
        ("scoring peak RSS (GB)", "scoring", lambda r: r["peak_rss"] / 1e9),
        ("scoring tokens/s", "scoring", lambda r: r["tokens_per_s"]),
        ("load s (screen stage)", "screen", lambda r: r["load_s"]),
    ]
    for title, name, value in rows:
        values = [value(table[label][name]) for label in labels]
        ratio = f"{values[1] / values[0]:8.2f}" if len(values) == 2 and values[0] else ""
        print(f"{title:<26}" + "".join(f"{v:>32.3f}" for v in values) + ratio)


if __name__ == "__main__":
    main()
