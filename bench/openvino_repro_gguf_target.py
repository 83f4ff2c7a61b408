"""OpenVINO GenAI: the model OpenVINO reads from the SmolLM2 Q4_1 GGUF is not the GGUF's model.

Expected: the IR OpenVINO writes from a GGUF file (LLMPipeline(..., enable_save_ov_model=True)) and
transformers' reading of the same file (from_pretrained(gguf_file=...): gguf-py's dequantisation,
the reference implementation of the format) give nearly the same next-token distributions at f32
(total variation of a few hundredths at most: rounding of 4-bit weights).
Observed (openvino-genai 2026.4.1.0, transformers 5.x): total variation around 0.7 at the first
generated position and a clearly higher loss on plain English text for OpenVINO's model.

Run: python bench/openvino_repro_gguf_target.py [model.gguf]   (no specaudit needed; needs transformers, gguf, torch)
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import torch
from openvino_repro_common import CHAT_TEMPLATE, gguf_path, header, ir_folder
from transformers import AutoModelForCausalLM, AutoTokenizer

TEXT = (
    "The quick brown fox jumps over the lazy dog. Paris is the capital of France, and Berlin is the capital of Germany. "
    "Water boils at one hundred degrees Celsius at sea level."
)
QUESTIONS = ["Write a poem about the sea.", "Explain recursion to a child.", "List three fruits.", "What is the capital of France?"]


def openvino_logits(compiled: ov.CompiledModel, ids: list[int]) -> np.ndarray:
    n = len(ids)
    feed = {
        "input_ids": np.asarray([ids], dtype=np.int64),
        "attention_mask": np.ones((1, n), dtype=np.int64),
        "position_ids": np.arange(n, dtype=np.int64)[None],
        "beam_idx": np.zeros(1, dtype=np.int32),
    }
    return np.array(compiled.create_infer_request().infer(feed)[compiled.outputs[0]][0], dtype=np.float64)


def main() -> None:
    gguf = gguf_path()
    folder = ir_folder(gguf)
    header({"model": gguf.name, "precision": "f32 on both sides"})
    compiled = ov.Core().compile_model(str(folder / "openvino_model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()

    def reference(ids: list[int]) -> np.ndarray:
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0].double().numpy()

    def softmax(z: np.ndarray) -> np.ndarray:
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    for question in QUESTIONS:
        ids = tokenizer.encode(CHAT_TEMPLATE.format(question), add_special_tokens=False)
        p, q = softmax(openvino_logits(compiled, ids)[-1]), softmax(reference(ids)[-1])
        print(f"{question!r}: TV(OpenVINO, transformers) at the first generated position = {0.5 * np.abs(p - q).sum():.3f}")
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    targets = np.asarray(ids[1:])
    for name, logits in (("OpenVINO", openvino_logits(compiled, ids)), ("transformers", reference(ids))):
        logp = (
            logits[:-1]
            - np.log(np.exp(logits[:-1] - logits[:-1].max(-1, keepdims=True)).sum(-1, keepdims=True))
            - logits[:-1].max(-1, keepdims=True)
        )
        print(f"{name}: mean loss on an English text of {len(ids)} tokens = {-logp[np.arange(len(targets)), targets].mean():.3f} nats")
    print("expected: TV below about 0.05 at every prompt, and the two losses within a few hundredths")


if __name__ == "__main__":
    main()
