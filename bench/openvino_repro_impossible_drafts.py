"""OpenVINO GenAI: sampled speculative decoding with top-p emits tokens outside the target's nucleus.

With temperature T and top-p, every token of the output must lie in the target's nucleus (the
most likely tokens of softmax(logits / T) up to mass top_p): rejection sampling keeps a draft x
with probability min(1, p(x) / q(x)), which is 0 where p(x) = 0. OpenVINO's rule
(src/cpp/src/sampling/sampler.cpp, Sampler::validate_candidate) compares a draw with q(x) / p(y),
y the target's own sample, and never looks at p(x), so a draft outside the nucleus can be kept.

This script decodes chat prompts with a target and a separate draft (optimum-intel exports, e.g.
Qwen2.5-Coder-1.5B-Instruct and -0.5B-Instruct), sampled at T = 0.7, top-p 0.9, a fresh pipeline
per request (a request that raises, see bench/openvino_repro_sampled_fault.py, stops a pipeline
drafting), and the same prompts and seeds without a draft as the control. Each emitted token is
checked against the target's nucleus, teacher-forced through the same IR at the engine's own
precision and at f32 without dynamic quantisation, so rounding at the nucleus edge cannot explain
a token far outside it; the script prints the mass of the tokens more likely than each offender.

Expected: no token outside the nucleus, with and without the draft.
Observed (openvino-genai 2026.4.1.0, CPU): see the printed counts.

Run: python bench/openvino_repro_impossible_drafts.py TARGET_IR DRAFT_IR   (no specaudit needed;
4 min wall, 192 CPU s and 21 GB peak RSS, file mappings included, for the 1.5B/0.5B pair)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import openvino as ov
import openvino_genai as genai
from openvino_repro_common import header, inputs, prompts

PROPERTIES = {"INFERENCE_NUM_THREADS": 1}  # the CPU defaults otherwise
EXACT = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
TEMPERATURE, TOP_P, MAX_NEW_TOKENS, SEEDS = 0.7, 0.9, 24, (1, 2)
QUESTIONS = ["Write a poem about the sea.", "Explain recursion to a child.", "Describe a wooden spoon for an online shop."]


def logits_along(compiled: ov.CompiledModel, ids: list[int]) -> np.ndarray:
    n = len(ids)
    feed = {
        "input_ids": np.asarray([ids], dtype=np.int64),
        "attention_mask": np.ones((1, n), dtype=np.int64),
        "position_ids": np.arange(n, dtype=np.int64)[None],
        "beam_idx": np.zeros(1, dtype=np.int32),
    }
    names = {name for port in compiled.inputs for name in port.get_names()}
    result = compiled.create_infer_request().infer({k: v for k, v in feed.items() if k in names})
    return np.array(result[compiled.outputs[0]][0], dtype=np.float64)


def mass_before(logits: np.ndarray, token: int) -> float:
    """The mass of the tokens more likely than `token` at TEMPERATURE: >= TOP_P means outside the nucleus."""
    p = np.exp((logits - logits.max()) / TEMPERATURE)
    p /= p.sum()
    return float(p[p > p[token]].sum())


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("give TARGET_IR DRAFT_IR (folders with openvino_model.xml)")
    target, draft = Path(sys.argv[1]), Path(sys.argv[2])
    header({**PROPERTIES, "target": str(target), "draft": str(draft), "temperature": TEMPERATURE, "top_p": TOP_P, "k": 4})
    ids = prompts(genai.Tokenizer(str(target)), QUESTIONS)
    core = ov.Core()
    references = {
        "exact": core.compile_model(str(target / "openvino_model.xml"), "CPU", {**PROPERTIES, **EXACT}),
        "engine precision": core.compile_model(str(target / "openvino_model.xml"), "CPU", PROPERTIES),
    }
    plain = genai.LLMPipeline(str(target), "CPU", **PROPERTIES)
    for label in ("without a draft", "with the draft"):
        if label == "with the draft":
            plain = None  # free its memory: the speculative pipelines hold the target again
        tokens = outside = faults = 0
        for seed in SEEDS:
            for question, prompt in ids.items():
                cfg = genai.GenerationConfig()
                cfg.max_new_tokens, cfg.do_sample, cfg.temperature, cfg.top_p, cfg.rng_seed = MAX_NEW_TOKENS, True, TEMPERATURE, TOP_P, seed
                if label == "with the draft":
                    cfg.num_assistant_tokens = 4
                    pipe = None  # the previous request's pipeline, freed before the next is built
                    pipe = genai.LLMPipeline(
                        str(target), "CPU", draft_model=genai.draft_model(str(draft), "CPU", **PROPERTIES), **PROPERTIES
                    )
                else:
                    pipe = plain
                try:
                    out = [int(t) for t in pipe.generate(inputs(prompt), cfg).tokens[0]]
                except RuntimeError:
                    faults += 1
                    continue
                along = {name: logits_along(model, [*prompt, *out])[len(prompt) - 1 : -1] for name, model in references.items()}
                for i, token in enumerate(out):
                    tokens += 1
                    masses = {name: mass_before(z[i], token) for name, z in along.items()}
                    if min(masses.values()) >= TOP_P:
                        outside += 1
                        shown = ", ".join(f"{name} {m:.3f}" for name, m in masses.items())
                        print(f"  {label}, seed {seed}, {question!r} position {i}: token {token}, mass before it {shown}")
        print(f"{label}: {outside} of {tokens} tokens outside the target's nucleus (expected 0); {faults} request(s) raised")


if __name__ == "__main__":
    main()
