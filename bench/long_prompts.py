"""Peak memory and time of the screen at long prompts, on the real default pair.

    PYTHONPATH=. python bench/long_prompts.py [--lengths 1000,3000] [--prompts 6] [--max-new-tokens 32]

For each prompt length it writes `--prompts` prompts of about that many tokens (core prompt
texts, joined and cut to length, each from another starting prompt) and screens them in a fresh
`specaudit run --engines screen --draft int8` process, once with the default token budget
(extra.screen_batch_tokens) and once with the budget off (rows bounded by screen_batch alone, as
before the budget), and prints each process's peak RSS (getrusage of the child) and wall time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UNBOUNDED = 10**9


def long_texts(tokenizer, length: int, count: int) -> list[str]:
    from specaudit.prompts import load_prompts

    core = [p.text for p in load_prompts("core").prompts if p.text]
    texts = []
    for start in range(count):
        ids: list[int] = []
        index = start * 37
        while len(ids) < length:
            ids += tokenizer(core[index % len(core)] + "\n\n", add_special_tokens=False)["input_ids"]
            index += 1
        texts.append(tokenizer.decode(ids[:length]))
    return texts


def screen_once(prompts: Path, out: Path, max_new_tokens: int, batch_tokens: int) -> tuple[float, float, list[int]]:
    config = out.parent / f"{out.name}.yaml"
    config.write_text(json.dumps({"extra": {"screen_batch_tokens": batch_tokens}}))
    argv = [sys.executable, "-m", "specaudit.cli", "run", "--engines", "screen", "--draft", "int8", "--prompts", str(prompts)]
    argv += ["--out", str(out), "--max-new-tokens", str(max_new_tokens), "--config", str(config), "--quiet"]
    started = time.perf_counter()
    script = "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    done = subprocess.run([sys.executable, "-c", script, *argv], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - started
    peak_mib = int(done.stdout.strip().splitlines()[-1]) / 1024  # ru_maxrss is in KiB on Linux
    rows = sorted({json.loads(line)["screen"]["batch_rows"] for line in (out / "records.jsonl").read_text().splitlines()})
    return peak_mib, wall, rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", default="1000,3000")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--unbounded", action="store_true", help="also run with the token budget off")
    args = parser.parse_args()

    from specaudit.engines.screen._batching import DEFAULT_BATCH_TOKENS
    from specaudit.models import load_tokenizer

    tokenizer = load_tokenizer("default")
    folder = Path(tempfile.mkdtemp(prefix="long-prompts-"))
    budgets = [DEFAULT_BATCH_TOKENS] + ([UNBOUNDED] if args.unbounded else [])
    print(f"{'prompt tokens':>13} {'prompts':>7} {'budget':>10} {'rows/batch':>10} {'peak RSS MiB':>12} {'wall s':>7}")
    for length in (int(x) for x in args.lengths.split(",")):
        prompts = folder / f"p{length}.jsonl"
        with open(prompts, "w") as handle:
            for i, text in enumerate(long_texts(tokenizer, length, args.prompts)):
                handle.write(json.dumps({"id": f"len{length}-{i}", "text": text, "attributes": {"band": str(length)}}) + "\n")
        for budget in budgets:
            peak, wall, rows = screen_once(prompts, folder / f"o{length}-{budget}", args.max_new_tokens, budget)
            label = "off" if budget == UNBOUNDED else str(budget)
            print(f"{length:>13} {args.prompts:>7} {label:>10} {','.join(map(str, rows)):>10} {peak:>12.0f} {wall:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
