"""OpenVINO GenAI: sampled speculative decoding raises, and the pipeline stops drafting afterwards.

Expected: with do_sample=True and a draft model (the target itself, or a separate draft), every generate() call
returns max_new_tokens tokens (or stops at EOS) with num_draft_tokens > 0, as greedy calls do.
Observed (openvino-genai 2026.4.1.0, CPU): the first sampled call raises
  RuntimeError: Check 'content_length <= prompt_ids.size() + m_generated_ids.size()' failed at
  .../openvino.genai/src/cpp/src/sequence_group.cpp:32
and every later call on the same pipeline, sampled or greedy, returns tokens with
num_draft_tokens == 0: the pipeline silently decodes without speculation.

With a separate draft (optimum-intel 2.2.0 fp16 exports of Qwen2.5-Coder-1.5B-Instruct and
-0.5B-Instruct as TARGET_IR DRAFT_IR) the same check is raised by some sampled calls: the third of
the three fresh pipelines in one run of this script (the first two drafted and finished).

Run: python bench/openvino_repro_sampled_fault.py [model.gguf | TARGET_IR DRAFT_IR] [--no-prefix-caching]   (no specaudit needed)
"""

from __future__ import annotations

import sys

import openvino_genai as genai
from openvino_repro_common import header, inputs, model_folders, pipelines, prompts

PROPERTIES = {"INFERENCE_NUM_THREADS": 1}
QUESTIONS = ["Write a poem about the sea.", "What is the capital of France?", "Explain recursion to a child."]


def config(sample: bool, seed: int) -> genai.GenerationConfig:
    cfg = genai.GenerationConfig()
    cfg.max_new_tokens = 32
    cfg.num_assistant_tokens = 4
    cfg.do_sample = sample
    if sample:
        cfg.temperature = 1.0
        cfg.rng_seed = seed
    return cfg


def call(pipe: genai.LLMPipeline, ids: list[int], cfg: genai.GenerationConfig) -> str:
    try:
        result = pipe.generate(inputs(ids), cfg)
    except RuntimeError as err:
        return f"RAISED {str(err).splitlines()[0][:110]}"
    metrics = result.extended_perf_metrics
    return (
        f"{len(result.tokens[0])} tokens, num_draft_tokens {metrics.get_num_draft_tokens()}, accepted {metrics.get_num_accepted_tokens()}"
    )


PREFIX_CACHING = "--no-prefix-caching" not in sys.argv  # LLMPipeline's default is on


def main() -> None:
    folder, draft = model_folders()
    drafter = "the target itself" if draft == folder else str(draft)
    header(
        {
            **PROPERTIES,
            "target": str(folder),
            "draft": drafter,
            "num_assistant_tokens": 4,
            "max_new_tokens": 32,
            "temperature": 1.0,
            "prefix caching": PREFIX_CACHING,
        }
    )
    ids = prompts(genai.Tokenizer(str(folder)), QUESTIONS)
    print("\n1. a fresh pipeline per sampled request (seed 1):")
    for question, prompt in ids.items():
        _, speculative = pipelines(folder, PROPERTIES, draft_folder=draft, prefix_caching=PREFIX_CACHING)
        print(f"  {question!r}: {call(speculative, prompt, config(True, 1))}")
    print("\n2. one pipeline: greedy, sampled, sampled, greedy:")
    _, speculative = pipelines(folder, PROPERTIES, draft_folder=draft, prefix_caching=PREFIX_CACHING)
    prompt = ids[QUESTIONS[0]]
    for step, sample in enumerate((False, True, True, False), 1):
        print(f"  call {step} ({'sampled' if sample else 'greedy'}): {call(speculative, prompt, config(sample, 1))}")
    print("\nexpected: no call raises, and every call drafts (num_draft_tokens > 0)")


if __name__ == "__main__":
    main()
