"""Scale-out overheads on the tiny random models, measured side by side in one run.

    python bench/scale.py [--prompts 16] [--samples 4] [--max-new-tokens 48] [--workers 2]

Prints, on one plan (prompts x samples x {vanilla, speculative}):
- records/s and output tokens/s of the local runner and of the Ray executor with --workers
  actors, their ratio, and whether both wrote the same records (timings aside): end to end, and
  while decoding (from the first record in records.jsonl to the last, so start-up is left out);
- what a Ray worker costs before it decodes: starting Ray here, and one actor's start plus
  model load (the actors of a run start in parallel);
- the local runner's overhead per shard: the plan as N one-prompt shards (`--shard i/N`, one
  process-free run() call each, every call loading the pair) against one run of all N prompts.

On a 2-core machine the Ray ratio is bounded by 2 (two single-thread actors on two cores, and
the driver needs some CPU too), and the end-to-end figure includes Ray's and the actors'
start-up, which on tiny models costs more than the decoding: read the decoding-phase line as
well. Absolute numbers drift between machines; ratios are the result.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import ray  # noqa: E402
import torch  # noqa: E402

from specaudit.config import RunConfig  # noqa: E402
from specaudit.engines import run  # noqa: E402
from specaudit.engines.ray import DecodeWorker  # noqa: E402
from specaudit.execution.records import read_records  # noqa: E402
from specaudit.models import save_tiny_pair  # noqa: E402
from specaudit.prompts._model import Prompt, PromptSet, rows_checksum  # noqa: E402

TIMING_FIELDS = {"wall_s", "ttft_s", "draft_s", "verify_s", "step_s"}
WORDS = "the rain falls on quiet hills while rivers carry stories of old towns to the sea".split()


def prompt_set(n: int) -> PromptSet:
    prompts = [Prompt(id=f"p{i}", text=" ".join(WORDS[i % 7 : i % 7 + 6]) + f" ({i})", attributes={"group": "ab"[i % 2]}) for i in range(n)]
    return PromptSet(name="bench", version=1, checksum=rows_checksum(prompts), source="memory", dimensions={}, prompts=prompts)


def outputs(folder: Path) -> dict:
    return {r["key"]: {k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in read_records(folder / "records.jsonl")}


def throughput(folder: Path, seconds: float) -> tuple[int, int, float, float]:
    records = read_records(folder / "records.jsonl")
    tokens = sum(len(r["output_token_ids"]) for r in records)
    return len(records), tokens, len(records) / seconds, tokens / seconds


class Arrivals(threading.Thread):
    """When records land in a records.jsonl (polled every 10 ms): the decoding phase of a run."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path, self.times, self.done = path, [], threading.Event()

    def run(self) -> None:
        seen, size = 0, -1
        while not self.done.is_set():
            if self.path.exists() and self.path.stat().st_size != size:
                data = self.path.read_bytes()
                size, count = len(data), data.count(b"\n")
                self.times += [time.perf_counter()] * (count - seen)
                seen = count
            time.sleep(0.01)

    def rate(self) -> float:
        """Records per second from the first record to the last (the first one's own time left out)."""
        self.done.set()
        self.join()
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        target, draft = save_tiny_pair(scratch / "models")
        prompts = prompt_set(args.prompts)
        cfg = RunConfig(
            target=str(target),
            draft=str(draft),
            engines="vanilla,speculative",
            samples=args.samples,
            max_new_tokens=args.max_new_tokens,
            device="cpu",
            seed=0,
            prompts="bench",
        )

        watch = Arrivals(scratch / "local" / "records.jsonl")
        watch.start()
        start = time.perf_counter()
        run(cfg, scratch / "local", prompt_set=prompts, progress=False)
        local_s = time.perf_counter() - start
        local_decoding = watch.rate()

        start = time.perf_counter()
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        ray_init_s = time.perf_counter() - start
        try:
            probe = ray.remote(DecodeWorker).options(num_cpus=1).remote(cfg)
            start = time.perf_counter()
            ray.get(probe.describe.remote())
            actor_s = time.perf_counter() - start
            ray.kill(probe)
            time.sleep(1.0)  # let the probe's process go before the measured run starts its actors

            watch = Arrivals(scratch / "ray" / "records.jsonl")
            watch.start()
            start = time.perf_counter()
            run(cfg.replace(executor="ray", workers=args.workers), scratch / "ray", prompt_set=prompts, progress=False)
            ray_s = time.perf_counter() - start
            ray_decoding = watch.rate()
        finally:
            ray.shutdown()
        executor = json.loads((scratch / "ray" / "manifest.json").read_text())["executor"]

        start = time.perf_counter()
        for index in range(args.prompts):
            run(cfg, scratch / "shards" / str(index), prompt_set=prompts, progress=False, shard=(index, args.prompts))
        sharded_s = time.perf_counter() - start
        sharded = sum(len(read_records(scratch / "shards" / str(i) / "records.jsonl")) for i in range(args.prompts))

        n, tokens, local_rps, local_tps = throughput(scratch / "local", local_s)
        _, _, ray_rps, ray_tps = throughput(scratch / "ray", ray_s)
        print(
            f"plan: {args.prompts} prompts x {args.samples} samples x 2 engines = {n} records, {tokens} output tokens "
            f"(tiny random Llama pair, CPU, 1 thread per process, {os.cpu_count()} cores)"
        )
        print(f"local runner            {local_s:7.2f} s  {local_rps:7.2f} records/s  {local_tps:8.1f} tokens/s")
        print(
            f"ray, {args.workers} workers, end to end {ray_s:7.2f} s  {ray_rps:7.2f} records/s  {ray_tps:8.1f} tokens/s  "
            f"(ray/local throughput {ray_rps / local_rps:.2f}x; {executor['shards']} shards, {executor['actor_failures']} actor failures)"
        )
        print(
            f"while decoding (first to last record): local {local_decoding:.2f} records/s, ray {ray_decoding:.2f} records/s "
            f"(ray/local {ray_decoding / local_decoding:.2f}x)"
        )
        print(f"same records (timings aside): {outputs(scratch / 'local') == outputs(scratch / 'ray')}")
        print(f"ray start-up here: ray.init {ray_init_s:.2f} s; one actor start + model load {actor_s:.2f} s")
        print(
            f"local shards: {args.prompts} shards ({sharded} records) {sharded_s:.2f} s vs one run {local_s:.2f} s: "
            f"overhead {(sharded_s - local_s) / (args.prompts - 1):.3f} s per extra shard"
        )


if __name__ == "__main__":
    main()
