"""Peak memory and throughput of the screen, the engines and scoring: the named Qwen2.5-Coder pair
against the default pair, side by side.

    PYTHONPATH=. python bench/real_pair.py [--per-group 1] [--max-new-tokens 16] [--engine-prompts 2]

Each (pair, stage) runs in a fresh process, so its peak RSS (ru_maxrss) is that stage's alone
(model loading included; the RSS right after loading is printed too). Prompts: the core set's
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
import tempfile
import time
from pathlib import Path

PAIRS = {
    "default (SmolLM2-135M + int8)": ("default", "int8"),
    "qwen2.5-coder 1.5B + 0.5B": ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"),
}
STAGES = ("screen", "engines", "scoring")


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def stage(args: argparse.Namespace) -> dict:
    """One stage on one pair, in this process."""
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
    result = {"load_s": time.perf_counter() - started, "rss_after_load": peak_rss(), "vocab": pair.vocab_size}
    prompts = load_prompts("core", dimensions=["language"], per_group=args.per_group, seed=0).prompts
    encoded = [prompt_token_ids(pair.tokenizer, p) for p in prompts]
    spec, eos = SamplingSpec(1.0), eos_token_ids(pair)
    seeds = [derive_seed(0, p.id, 0) for p in prompts]
    paths_file = Path(args.paths)
    started = time.perf_counter()
    if args.stage == "screen":
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
        paths_file.write_text(json.dumps([p.tokens for p in paths]))
    elif args.stage == "engines":
        tokens = {"vanilla": 0, "speculative": 0}
        seconds = {"vanilla": 0.0, "speculative": 0.0}
        for ids, seed in list(zip(encoded, seeds))[: args.engine_prompts]:
            common = dict(spec=spec, max_new_tokens=args.max_new_tokens, eos_ids=eos, vocab_size=pair.vocab_size)
            for name in ("vanilla", "speculative"):
                generator = torch.Generator().manual_seed(seed)
                t0 = time.perf_counter()
                if name == "vanilla":
                    out = vanilla_generate(pair.target, ids, generator=generator, **common)
                else:
                    out = speculative_generate(pair.target, pair.draft, ids, k=4, generator=generator, **common)
                seconds[name] += time.perf_counter() - t0
                tokens[name] += len(out.tokens)
        result.update(
            prompts=args.engine_prompts,
            tokens=tokens["vanilla"] + tokens["speculative"],
            vanilla_tokens_per_s=tokens["vanilla"] / seconds["vanilla"],
            speculative_tokens_per_s=tokens["speculative"] / seconds["speculative"],
        )
    else:
        outputs = json.loads(paths_file.read_text())
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
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-group", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--engine-prompts", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--pairs", default=",".join(PAIRS), help="comma-separated pair labels (default: both)")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)  # the child process
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--draft", help=argparse.SUPPRESS)
    parser.add_argument("--paths", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:
        print(json.dumps(stage(args)))
        return
    table: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for label in args.pairs.split(","):
            target, draft = PAIRS[label]
            paths = str(Path(scratch) / f"{target}.json")
            for name in STAGES:
                command = [sys.executable, __file__, "--stage", name, "--target", target, "--draft", draft, "--paths", paths]
                command += ["--per-group", str(args.per_group), "--max-new-tokens", str(args.max_new_tokens)]
                command += ["--engine-prompts", str(args.engine_prompts), "--threads", str(args.threads), "--dtype", args.dtype]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode != 0:
                    sys.exit(f"{label} / {name} failed:\n{done.stderr[-3000:]}")
                table.setdefault(label, {})[name] = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"{label:<32} {name:<8} {json.dumps(table[label][name])}", flush=True)
    labels = list(table)
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
