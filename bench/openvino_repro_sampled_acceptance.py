"""OpenVINO GenAI: sampled speculative decoding rejects drafts that rejection sampling keeps.

The draft is the target itself at f32 beside the target at the CPU default (bf16 on CPUs with
AVX-512 BF16 / AMX): the same model up to rounding, so a correct speculative sampler keeps a draft
with probability sum_x min(p(x), q(x)), which this script measures along the generated tokens by
teacher-forcing both precisions through the IR (expected acceptance, close to 1).
Observed (openvino-genai 2026.4.1.0, CPU, T = 1): the engine keeps far fewer (about 0.4).
The source (src/cpp/src/sampling/sampler.cpp, Sampler::validate_candidate) compares a uniform
draw from {0, 0.01, ..., 1} with q(x) / p(y): the draft's probability of its token over the
target's probability of the target's own sample y, not p(x) / q(x); a rejected draft is then
replaced by a plain sample of p (its log-probability divided by p'), not a sample of the residual
max(0, p - q).

With the draft at exactly the target's precision (q = p) the first sampled call raises instead:
bench/openvino_repro_sampled_fault.py.

Run: python bench/openvino_repro_sampled_acceptance.py [model.gguf]   (no specaudit needed)
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino_genai as genai
from openvino_repro_common import gguf_path, header, inputs, ir_folder, prompts

THREADS = 1
DRAFT = {"INFERENCE_NUM_THREADS": THREADS, "INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
TARGET = {"INFERENCE_NUM_THREADS": THREADS}  # the CPU defaults
QUESTIONS = ["Write a poem about the sea.", "Explain recursion to a child.", "List three fruits.", "What is the capital of France?"]
SETTINGS = ((1.0, 1.0), (0.7, 0.9))  # (temperature, top_p)
SEEDS = range(1, 3)


def warped(logits: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    if top_p < 1.0:
        order = np.argsort(-p, axis=-1)
        sorted_p = np.take_along_axis(p, order, axis=-1)
        keep_sorted = np.cumsum(sorted_p, axis=-1) - sorted_p < top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        p = np.where(keep, p, 0.0)
        p /= p.sum(axis=-1, keepdims=True)
    return p


def teacher_forced(compiled: ov.CompiledModel, ids: list[int]) -> np.ndarray:
    n = len(ids)
    request = compiled.create_infer_request()
    feed = {
        "input_ids": np.asarray([ids], dtype=np.int64),
        "attention_mask": np.ones((1, n), dtype=np.int64),
        "position_ids": np.arange(n, dtype=np.int64)[None],
        "beam_idx": np.zeros(1, dtype=np.int32),
    }
    return np.array(request.infer(feed)[compiled.outputs[0]][0])


def main() -> None:
    folder = ir_folder(gguf_path())
    header({"target": TARGET, "draft (the target's IR)": DRAFT, "num_assistant_tokens": 4, "max_new_tokens": 32, "seeds": list(SEEDS)})
    ids = prompts(genai.Tokenizer(str(folder)), QUESTIONS)
    core = ov.Core()
    target_precision = "bf16" if "bfloat16" in str(core.get_property("CPU", "INFERENCE_PRECISION_HINT")) else "f32"
    exact = {
        "target": core.compile_model(str(folder / "openvino_model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": target_precision}),
        "draft": core.compile_model(str(folder / "openvino_model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}),
    }
    for temperature, top_p in SETTINGS:
        drafted = kept = faults = 0
        expected: list[float] = []
        for seed in SEEDS:
            for prompt in ids.values():
                # a fresh pipeline per request: after a fault (bench/openvino_repro_sampled_fault.py) one stops drafting
                pipe = genai.LLMPipeline(str(folder), "CPU", draft_model=genai.draft_model(str(folder), "CPU", **DRAFT), **TARGET)
                cfg = genai.GenerationConfig()
                cfg.max_new_tokens, cfg.num_assistant_tokens = 32, 4
                cfg.do_sample, cfg.temperature, cfg.top_p, cfg.rng_seed = True, temperature, top_p, seed
                try:
                    result = pipe.generate(inputs(prompt), cfg)
                except RuntimeError:
                    faults += 1
                    continue
                metrics = result.extended_perf_metrics
                drafted += metrics.get_num_draft_tokens()
                kept += metrics.get_num_accepted_tokens()
                path = [*prompt, *[int(t) for t in result.tokens[0]]]
                p = warped(teacher_forced(exact["target"], path)[len(prompt) - 1 : -1], temperature, top_p)
                q = warped(teacher_forced(exact["draft"], path)[len(prompt) - 1 : -1], temperature, top_p)
                expected.extend(np.minimum(p, q).sum(axis=-1).tolist())
        print(
            f"T={temperature}, top_p={top_p}: engine kept {kept} of {drafted} drafts ({kept / max(drafted, 1):.3f}); "
            f"rejection sampling keeps sum min(p, q) = {np.mean(expected):.3f} on average along the same tokens "
            f"(min {np.min(expected):.3f}, {len(expected)} positions); {faults} of {len(SEEDS) * len(ids)} requests raised"
        )
    print("expected: the engine's acceptance close to sum min(p, q) (a few hundred drafts: within about +-0.05)")


if __name__ == "__main__":
    main()
