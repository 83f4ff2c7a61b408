"""OpenVINO GenAI: greedy speculation with the target as its own draft, at the CPU defaults and at exact precision.

Expected: with the target drafting for itself under greedy decoding, every draft is the target's
argmax, so every draft is kept (acceptance 1) and the speculative output equals plain decoding's;
and the engine's own counters agree with its own step record: each verification step emits the
drafts it kept plus one token, so sum(batch_size - 1) over the steps after the prompt pass equals
get_num_accepted_tokens().
Observed (openvino-genai 2026.4.1.0, CPU with AVX-512 BF16): at the CPU defaults (bf16 inference,
u8 KV cache, activations quantised on the fly in groups of 32) drafts are rejected, the speculative
output differs from plain decoding's, and get_num_accepted_tokens() is below what the step record
(raw_metrics.m_batch_sizes) says was kept. At f32 inference, f32 KV cache and
DYNAMIC_QUANTIZATION_GROUP_SIZE=0 the expectations hold.

Run: python bench/openvino_repro_greedy_identity.py [model.gguf]   (no specaudit needed)
"""

from __future__ import annotations

import openvino_genai as genai
from openvino_repro_common import gguf_path, header, inputs, ir_folder, pipelines, prompts

QUESTIONS = ["Write a poem about the sea.", "Explain recursion to a child.", "List three fruits.", "What is the capital of France?"]
SETTINGS = {
    "CPU defaults": {"INFERENCE_NUM_THREADS": 1},
    "exact (f32, f32 KV, no dynamic quantisation)": {
        "INFERENCE_NUM_THREADS": 1,
        "INFERENCE_PRECISION_HINT": "f32",
        "KV_CACHE_PRECISION": "f32",
        "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0,
    },
}


def main() -> None:
    folder = ir_folder(gguf_path())
    header({"draft": "the target itself", "num_assistant_tokens": 4, "max_new_tokens": 32, "do_sample": False})
    ids = prompts(genai.Tokenizer(str(folder)), QUESTIONS)
    for label, properties in SETTINGS.items():
        plain, speculative = pipelines(folder, properties)
        drafted = kept = from_steps = same = 0
        for prompt in ids.values():
            cfg = genai.GenerationConfig()
            cfg.max_new_tokens, cfg.num_assistant_tokens = 32, 4
            reference = list(plain.generate(inputs(prompt), cfg).tokens[0])
            result = speculative.generate(inputs(prompt), cfg)
            metrics = result.extended_perf_metrics
            drafted += metrics.get_num_draft_tokens()
            kept += metrics.get_num_accepted_tokens()
            from_steps += sum(size - 1 for size in list(metrics.raw_metrics.m_batch_sizes)[1:])
            same += list(result.tokens[0]) == reference
        print(
            f"{label}: kept {kept} of {drafted} drafts ({kept / max(drafted, 1):.3f}); speculative output = plain on "
            f"{same} of {len(ids)} prompts; accepted counter {kept}, kept per the step record {from_steps}"
        )
    print("expected: acceptance 1.000, speculative = plain on every prompt, the two accepted counts equal")


if __name__ == "__main__":
    main()
