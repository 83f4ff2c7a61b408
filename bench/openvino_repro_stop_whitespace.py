"""OpenVINO GenAI: a stop string that ends in a space or newline is dropped from the output, with its
token, although include_stop_str_in_output is set.

Expected: with `stop_strings = {STOP}` and `include_stop_str_in_output = True`, the output is the
plain output up to and including the token whose text completes STOP, and its text holds STOP (as
the flag's documentation says, and as the OpenAI API, vLLM and llama-server keep the completing
token).
Observed (openvino-genai 2026.4.1.0): for "\n" (and any stop ending in " " or "\n") the output
ends one token or more earlier, before the stop; its text holds no stop, while the finish reason
is STOP. A stop ending in another character ("Tuesday", ".") is kept. The cause, read in
src/cpp/src/sampling/sampler.cpp (match_stop_string): the kept text is cut after the stop and then
stripped of trailing ' ' and '\n' ("to remove word splitting symbols from tail") before the
tokens to keep are counted.

Run: python bench/openvino_repro_stop_whitespace.py [model.gguf]   (no specaudit needed)
"""

from __future__ import annotations

import openvino_genai as genai
from openvino_repro_common import gguf_path, header, inputs, ir_folder, prompts

QUESTIONS = ["List the days of the week.", "Write a poem about the sea."]
STOPS = ["\n", ": ", "Tuesday", "."]
EXACT = {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}


def config(stop: str | None) -> genai.GenerationConfig:
    cfg = genai.GenerationConfig()
    cfg.max_new_tokens = 32
    if stop is not None:
        cfg.stop_strings, cfg.include_stop_str_in_output = {stop}, True
    return cfg


def main() -> None:
    folder = ir_folder(gguf_path())
    header({"do_sample": False, "max_new_tokens": 32, "include_stop_str_in_output": True, **EXACT})
    tokenizer = genai.Tokenizer(str(folder))
    pipe = genai.LLMPipeline(str(folder), "CPU", **EXACT)
    for question, ids in prompts(tokenizer, QUESTIONS).items():
        plain = [int(t) for t in pipe.generate(inputs(ids), config(None)).tokens[0]]
        for stop in STOPS:
            # expected: the shortest prefix of the plain output whose text holds the stop
            expected = next((n for n in range(1, len(plain) + 1) if stop in tokenizer.decode(plain[:n])), None)
            if expected is None:
                continue
            result = pipe.generate(inputs(ids), config(stop))
            tokens = [int(t) for t in result.tokens[0]]
            text = tokenizer.decode(tokens)
            print(
                f"{question!r} stop {stop!r}: expected {expected} tokens, observed {len(tokens)}; "
                f"stop in the output text: {stop in text}; finish {result.finish_reasons[0].name}; text {text[-24:]!r}"
            )


if __name__ == "__main__":
    main()
