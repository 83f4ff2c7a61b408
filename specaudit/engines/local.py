"""The local executor: the model pair in this process decodes the plan, one item at a time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specaudit.contracts.run import PlanItem
from specaudit.engines.decode import (
    decode_item,
    device_entry,
    eos_token_ids,
    library_versions,
    load_pair_for,
    warm_up,
)
from specaudit.execution.base import Emit, Executor
from specaudit.execution.faults import attempt
from specaudit.execution.folder import RunFolder
from specaudit.execution.plan import derive_seed
from specaudit.execution.preflight import check_prompt_lengths
from specaudit.prompts import prompt_token_ids

if TYPE_CHECKING:
    from specaudit.config import RunConfig
    from specaudit.models import ModelPair


class LocalExecutor(Executor):
    """Decodes with specaudit's engines here; `pair` (a loaded ModelPair) saves loading it again."""

    def __init__(self, cfg: RunConfig, pair: ModelPair | None = None) -> None:
        super().__init__(cfg)
        self.pair = pair

    def start(self, folder: RunFolder) -> dict:
        self.verify = self.cfg.load_verify()
        self.pair = self.pair or load_pair_for(self.cfg)
        return {"models": self.pair.manifest(), "device": device_entry(self.pair), "versions": library_versions()}

    def execute(self, folder: RunFolder, items: list[PlanItem], emit: Emit) -> None:
        pair, cfg = self.pair, self.cfg
        eos_ids = eos_token_ids(pair)
        encoded = {p.id: prompt_token_ids(pair.tokenizer, p, cfg.chat_template) for p in folder.prompt_set.prompts}
        check_prompt_lengths(encoded, pair.target, cfg.max_new_tokens, draft=pair.draft)
        if items:
            warm_up(pair, cfg, encoded[items[0].prompt.id], self.verify, eos_ids)
        for item in items:  # an engine that raises on one item is that item's fault (execution.faults), not the run's end
            seed = derive_seed(cfg.seed, item.prompt.id, item.sample)
            emit(attempt(item, lambda item=item: decode_item(pair, cfg, item, encoded[item.prompt.id], self.verify, eos_ids), seed))
