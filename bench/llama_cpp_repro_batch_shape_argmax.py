"""llama.cpp's greedy argmax depends on the call's batch shape: a minimal reproduction (no specaudit).

With the target as its own draft, llama.cpp's speculative decoding drafts one token a call and
verifies the k drafts in one batch. A correct greedy verifier then keeps every draft, unless the two
call shapes round the same model's logits differently enough to move the argmax. This script
decodes greedily one token a call (the draft's shape), re-evaluates the same tokens as one batch
(the verifier's shape), and counts the positions whose argmax differs, with the top-2 margin there.

    python bench/llama_cpp_repro_batch_shape_argmax.py GGUF [--tokens 64] [--prompts 8]
"""

from __future__ import annotations

import argparse

import llama_cpp
import numpy as np

PROMPTS = [
    "Explain why the sky is blue.",
    "Write a short poem about rain.",
    "List three fruits and their colours.",
    "What is the capital of Kenya?",
    "Describe how a bicycle works.",
    "Give me a recipe for pancakes.",
    "Translate 'good morning' into Spanish.",
    "Why do cats purr?",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=8)
    args = ap.parse_args()
    llm = llama_cpp.Llama(args.gguf, n_ctx=512, n_threads=1, logits_all=True, verbose=False)
    print(f"llama-cpp-python {llama_cpp.__version__}, {args.gguf}")
    flips = total = 0
    for text in PROMPTS[: args.prompts]:
        prompt = llm.tokenize(text.encode(), add_bos=True)
        llm.reset()
        llm.eval(prompt)
        stepwise, out = [], []
        for _ in range(args.tokens):  # the draft's shape: one token a call
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            stepwise.append(row)
            out.append(int(row.argmax()))
            llm.eval([out[-1]])
        llm.reset()
        llm.eval(prompt + out[:-1])  # the verifier's shape: the same tokens in one batch
        batched = np.array(llm.scores[len(prompt) - 1 : len(prompt) - 1 + len(out)], dtype=np.float64)
        for t, (a, b) in enumerate(zip(stepwise, batched)):
            total += 1
            if a.argmax() != b.argmax():
                flips += 1
                top2 = np.sort(a)[-2:]
                print(
                    f"  {text[:30]!r} position {t}: one-token argmax {a.argmax()}, batched {b.argmax()}, top-2 margin {top2[1] - top2[0]:.4f}"
                )
    print(f"argmax differs between call shapes at {flips} of {total} positions (a batch-invariant engine: 0)")


if __name__ == "__main__":
    main()
