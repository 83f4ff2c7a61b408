"""The Ray executor: the plan of one run spread over Ray actors (`specaudit run --executor ray`).

- The plan is cut into shards by prompt id (specaudit.execution.merge.shard_of), several per worker, so a
  prompt's engines and samples stay on one actor (its paired timings see one machine state) and
  a lost worker costs one small shard, not a quarter of the run.
- One actor per GPU (or per `threads` CPUs) loads the model pair once and decodes shard after
  shard with the local executor's own functions (specaudit.engines.decode.decode_item).
- Records stream back one at a time; this process is the only writer of records.jsonl, so the
  folder is exactly what a local run writes, and it resumes like one.
- An actor that dies has its shard re-queued on a fresh actor. Keys already written are skipped
  and a record depends only on its seed, so nothing is lost, duplicated or changed.
"""

from __future__ import annotations

import logging
import secrets
import warnings
from collections import Counter, deque
from typing import TYPE_CHECKING

from specaudit.config import RunConfig
from specaudit.contracts.run import PlanItem
from specaudit.engines.decode import (
    decode_item,
    device_entry,
    eos_token_ids,
    library_versions,
    load_pair_for,
    warm_up,
)
from specaudit.errors import InputError
from specaudit.execution.base import Emit, Executor
from specaudit.execution.faults import attempt
from specaudit.execution.folder import RunFolder
from specaudit.execution.plan import derive_seed, shard_of
from specaudit.execution.preflight import check_prompt_lengths
from specaudit.prompts import prompt_token_ids

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from types import ModuleType
    from typing import Any

    from specaudit.contracts.run import Record

SHARDS_PER_WORKER = 4  # more shards than workers: a dead worker's re-run is small, and fast workers take more
MAX_SHARD_ATTEMPTS = 3  # a shard that kills its actor this often is a problem of its own, not bad luck
ACTOR_NAME = "specaudit-{run}-worker-{index}"  # named, so that `ray list actors` / the dashboard say whose they are


def _import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray, which is not installed; install it with `pip install 'specaudit[ray]'`") from None
    return ray


class DecodeWorker:
    """A Ray actor's state: the model pair, loaded once, and the local executor's decoding functions.

    Errors while loading are kept and raised by `describe`, so the driver reports the user's
    mistake (an unknown model, say) as the one-sentence InputError a local run would give.
    """

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.error: Exception | None = None
        self.warm = False
        try:
            self.pair = load_pair_for(cfg)
            self.verify = cfg.load_verify()
            self.eos_ids = eos_token_ids(self.pair)
        except Exception as err:  # noqa: BLE001 - re-raised by describe(), in the driver's terms
            self.error = err

    def describe(self, prompts: Iterable[str] = ()) -> dict:
        """The manifest's models, device and versions, once `prompts` are checked to fit the context
        (all of them, before any actor decodes, so no record is written for a run that cannot finish)."""
        if self.error is not None:
            raise self.error
        encoded = {p.id: prompt_token_ids(self.pair.tokenizer, p, self.cfg.chat_template) for p in prompts}
        check_prompt_lengths(encoded, self.pair.target, self.cfg.max_new_tokens, draft=self.pair.draft)
        return {"models": self.pair.manifest(), "device": device_entry(self.pair), "versions": library_versions()}

    def decode(self, items: list[PlanItem]) -> Iterator[Record]:
        """Yield the record of each plan item, in order (a Ray streaming generator)."""
        if self.error is not None:
            raise self.error
        encoded: dict[str, list[int]] = {}
        for item in items:
            prompt = item.prompt
            if prompt.id not in encoded:  # lengths were checked by describe()
                encoded[prompt.id] = prompt_token_ids(self.pair.tokenizer, prompt, self.cfg.chat_template)
            if not self.warm:  # once per actor, before its first timed decoding
                warm_up(self.pair, self.cfg, encoded[prompt.id], self.verify, self.eos_ids)
                self.warm = True
            # an engine that raises on one item is that item's fault (execution.faults), written by the one writer
            seed = derive_seed(self.cfg.seed, prompt.id, item.sample)
            yield attempt(
                item, lambda item=item: decode_item(self.pair, self.cfg, item, encoded[prompt.id], self.verify, self.eos_ids), seed
            )


def _actor_plan(cfg: RunConfig, resources: dict, workers: int | None) -> tuple[dict, str, int]:
    """(Ray resources per actor, device the actors use, number of actors)."""
    gpus = int(resources.get("GPU", 0))
    cpus = int(resources.get("CPU", 1))
    if cfg.device.startswith("cuda") or (cfg.device == "auto" and gpus >= 1):
        if gpus < 1:
            raise InputError(f"--device {cfg.device} with --executor ray: the Ray cluster has no GPU; use --device cpu or a GPU cluster")
        # Ray gives each actor its own GPU as cuda:0 (CUDA_VISIBLE_DEVICES), whatever index --device named.
        per_actor, device, fits = {"num_gpus": 1, "num_cpus": 1}, "cuda", gpus
    else:
        per_actor, device, fits = {"num_cpus": cfg.threads}, "cpu", max(1, cpus // cfg.threads)
    count = workers or fits
    if count > fits:
        warnings.warn(f"--workers {count}: the Ray cluster has room for {fits} now; the others wait for resources", stacklevel=3)
    return per_actor, device, count


def _task_error(ray: ModuleType, err: Exception) -> Exception:
    """A worker's InputError comes back wrapped by Ray: unwrap it into the plain sentence."""
    cause = getattr(err, "cause", None)
    if isinstance(err, ray.exceptions.RayTaskError) and isinstance(cause, InputError):
        return InputError(str(cause))
    return err


class RayExecutor(Executor):
    """Ray actors decode; this process only writes the run folder.

    `address` names a running cluster ("auto", "ray://head:10001"); without one (and without
    RAY_ADDRESS) a local Ray instance is started here and shut down afterwards. If Ray is
    already initialised in this process, that connection is used as it is.
    """

    label = "decoding (ray)"

    def __init__(self, cfg: RunConfig, *, workers: int | None = None, address: str | None = None) -> None:
        super().__init__(cfg)
        self.workers, self.address = workers, address
        self.ray, self.owns_ray, self.actors = None, False, []

    def check(self, folder: RunFolder) -> None:
        if folder.shard is not None:
            raise InputError("--shard and --executor ray do not combine: Ray spreads the whole plan itself; use one or the other")
        self.cfg.load_verify()  # a --verify that cannot be imported fails here, before any actor starts

    def start(self, folder: RunFolder) -> dict:
        ray = self.ray = _import_ray()
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            options = {"logging_level": logging.WARNING}
            if self.address is None:  # a cluster started here: no dashboard, nothing listening beyond what Ray needs
                options["include_dashboard"] = False
            try:
                ray.init(address=self.address, **options)
            except ConnectionError as err:
                self.owns_ray = False
                raise InputError(
                    f"--ray-address {self.address}: no Ray cluster answers there ({err}); start one with `ray start --head` "
                    "or leave --ray-address out to start Ray here"
                ) from None
        per_actor, device, n_workers = _actor_plan(self.cfg, ray.cluster_resources(), self.workers)
        self.n_shards = SHARDS_PER_WORKER * n_workers
        self.shards: dict[int, list[PlanItem]] = {}
        for item in folder.todo:
            self.shards.setdefault(shard_of(item.prompt.id, self.n_shards), []).append(item)
        worker_class = ray.remote(DecodeWorker)
        actor_cfg = self.cfg.replace(device=device)
        run_token = secrets.token_hex(3)

        def spawn() -> Any:
            actor = worker_class.options(name=ACTOR_NAME.format(run=run_token, index=len(self.actors)), **per_actor).remote(actor_cfg)
            self.actors.append(actor)
            return actor

        self.spawn = spawn
        self.idle = deque(spawn() for _ in range(max(1, min(n_workers, len(self.shards)))))
        try:
            info = ray.get(self.idle[0].describe.remote(list(folder.prompt_set.prompts)))
        except ray.exceptions.RayTaskError as err:
            raise _task_error(ray, err) from None
        self.report = {"kind": "ray", "workers": len(self.idle), "shards": self.n_shards, "actor_failures": 0}
        return {**info, "executor": self.report}

    def execute(self, folder: RunFolder, items: list[PlanItem], emit: Emit) -> None:
        ray, idle, shards = self.ray, self.idle, self.shards
        queue = deque(sorted(shards))
        running: dict = {}  # streaming generator -> (actor, shard index)
        attempts: Counter = Counter()
        while queue or running:
            while queue and idle:
                index = queue.popleft()
                pending = [item for item in shards[index] if item.key not in folder.done]
                if pending:
                    actor = idle.popleft()
                    running[actor.decode.options(num_returns="streaming").remote(pending)] = (actor, index)
            if not running:  # the queued shards were all written already
                continue
            ready, _ = ray.wait(list(running), num_returns=1)
            for stream in ready:
                actor, index = running[stream]
                try:
                    record = ray.get(next(stream))
                except StopIteration:
                    del running[stream]
                    idle.append(actor)
                    continue
                except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError):
                    # The actor is gone (killed, out of memory, node lost): its shard goes back
                    # on the queue, minus the records already written, for a fresh actor.
                    del running[stream]
                    attempts[index] += 1
                    self.report["actor_failures"] += 1
                    if attempts[index] >= MAX_SHARD_ATTEMPTS:
                        prompts = sorted({item.prompt.id for item in shards[index]})
                        raise RuntimeError(
                            f"shard {index} of {self.n_shards} (prompts {', '.join(prompts[:5])}"
                            f"{', ...' if len(prompts) > 5 else ''}) lost its Ray actor {attempts[index]} times; "
                            "see the Ray logs (out of memory?)"
                        ) from None
                    queue.appendleft(index)
                    idle.append(self.spawn())
                    continue
                except ray.exceptions.RayTaskError as err:
                    raise _task_error(ray, err) from None
                emit(record)  # a key already written (a re-queued shard's overlap) is skipped there
        folder.save_manifest()  # with the final actor_failures count

    def close(self) -> None:
        if self.ray is None:
            return
        for actor in self.actors:
            self.ray.kill(actor)
        if self.owns_ray:
            self.ray.shutdown()
