"""OpenVINO GenAI: sampled speculative decoding with requests in flight in a ContinuousBatchingPipeline.

Four sampled requests at a time are added (`add_request`) and the pipeline stepped (`step`) until
each finishes, the way a server batches them; the target is its own draft. A step that raises is
the fault of every request in flight; their handles are then cancelled (as a server drops a failed
request) and the next four are added. Printed: per batch, how many requests finished, how many
faulted and with which message, and the finished requests' tokens per step.

Expected: every request finishes (max_new_tokens tokens, or EOS), drafting (steps emitting more
than one token), as greedy requests do.

Run: python bench/openvino_repro_batched_fault.py [model.gguf] [--greedy] [--no-cancel]
(no specaudit needed; about a minute on two cores for the default 5 batches of 4)
"""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np
import openvino as ov
import openvino_genai as genai
from openvino_repro_common import gguf_path, header, ir_folder, prompts

QUESTIONS = [
    "Write a poem about the sea.",
    "What is the capital of France?",
    "Explain recursion to a child.",
    "List three uses of copper.",
    "Describe a sunrise in one paragraph.",
]
GREEDY, CANCEL = "--greedy" in sys.argv, "--no-cancel" not in sys.argv
TARGET = {"INFERENCE_NUM_THREADS": 1}  # the CPU plugin's own precision defaults
DRAFT = {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
BATCHES, IN_FLIGHT, NEW_TOKENS, K = 5, 4, 24, 4


def config(seed: int) -> genai.GenerationConfig:
    cfg = genai.GenerationConfig()
    cfg.max_new_tokens, cfg.num_assistant_tokens, cfg.do_sample = NEW_TOKENS, K, not GREEDY
    if not GREEDY:
        cfg.temperature, cfg.rng_seed = 1.0, seed
    return cfg


def main() -> None:
    folder = ir_folder(gguf_path())
    header({"target": TARGET, "draft": DRAFT, "greedy": GREEDY, "cancel failed handles": CANCEL, "in flight": IN_FLIGHT, "k": K})
    scheduler = genai.SchedulerConfig()
    scheduler.enable_prefix_caching = True
    draft = genai.draft_model(str(folder), "CPU", **DRAFT)
    pipe = genai.ContinuousBatchingPipeline(str(folder), scheduler, "CPU", {**TARGET, "draft_model": draft})
    ids = list(prompts(genai.Tokenizer(str(folder)), QUESTIONS).values())
    request_id = 0
    for batch in range(BATCHES):
        handles = {}
        for slot in range(IN_FLIGHT):
            request_id += 1
            tensor = ov.Tensor(np.asarray([ids[(batch + slot) % len(ids)]], dtype=np.int64))
            handles[request_id] = pipe.add_request(request_id, tensor, config(seed=request_id))
        finished, faults, sizes = 0, Counter(), []
        while handles:
            try:
                pipe.step()
            except RuntimeError as err:
                faults[str(err).splitlines()[0][:100]] += len(handles)
                for handle in handles.values():
                    if CANCEL:
                        handle.cancel()
                handles = {}
                break
            for rid, handle in list(handles.items()):
                if handle.get_status().name != "RUNNING":
                    sizes.append(list(handle.get_perf_metrics().raw_metrics.m_batch_sizes))
                    finished += 1
                    del handles[rid]
        print(f"batch {batch}: {finished} finished, {sum(faults.values())} faulted {dict(faults)}; tokens per step {sizes}")


if __name__ == "__main__":
    main()
