"""The screen executor (`--engines screen`): acceptance on every prompt, without the engines.

Each plan item becomes a record of engine "screen" holding the target sample (`output_token_ids`,
drawn with the run's derive_seed in batches of at most `extra.screen_batch` rows (32) and
`extra.screen_batch_tokens` padded positions (8192: rows x (longest prompt + max_new_tokens)),
so it is the vanilla engine's sample for that seed up to float ties) and the speculative counts expected along it at
the run's k (specaudit.stats.acceptance): `proposed`, `accepted`, `steps` (expectations given
the path; exact counts for n-gram), `expected_reached`, and per output position `position_beta`
(Σ min(p_t, q_t)) and `position_accept` (min(1, q_t(x_t)/p_t(x_t)); 1/0 for n-gram). No engine
latency is measured: `wall_s` / `ttft_s` stay null and the record's share of its batch's time
goes under `screen`. Beside the tree engine (`--engines screen,tree`) a record also holds
`tree_expected`: the tree's expected tokens over steps and, per depth, accepted over reached
along the path (stats.shape_screen). Records are written batch by batch, so a run resumes. A planted disparity
(`--plant-disparity`) mixes the draft's q on the rows of its group only, as the engine does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specaudit.contracts.run import SCREEN_ENGINE, PlanItem
from specaudit.engines.decode import device_entry, eos_token_ids, library_versions, pad_token_id
from specaudit.engines.screen_records import screen_record
from specaudit.errors import InputError
from specaudit.execution.base import Emit, Executor
from specaudit.execution.folder import RunFolder
from specaudit.execution.plan import derive_seed
from specaudit.execution.preflight import check_prompt_lengths
from specaudit.prompts import prompt_token_ids

if TYPE_CHECKING:
    from specaudit.config import RunConfig
    from specaudit.models import ModelPair


class ScreenExecutor(Executor):
    """The screen, and with `--engines screen,vanilla,speculative` also the local engines on the
    subset of prompts the plan gives them (execution.plan.engine_subset), with the same models.
    The screen is batched and uses every core (`extra: {screen_threads: N}` to change it); the
    engines decode at batch 1 with `--threads`, as in any run, so their timings mean the same."""

    label = "screening"
    unit = "record"

    def __init__(self, cfg: RunConfig, *, pair: ModelPair | None = None) -> None:
        super().__init__(cfg)
        self.pair = pair
        self.engines = None
        if len(self.record_engines()) > 1:
            self.label = "screening, then decoding"  # the progress bar's: one bar for both parts

    def record_engines(self) -> tuple[str, ...]:
        return (SCREEN_ENGINE, *(e for e in self.cfg.engines if e != SCREEN_ENGINE))

    def start(self, folder: RunFolder) -> dict:
        import torch

        from specaudit.models import load_pair

        if self.pair is None:
            torch.set_num_threads(self.cfg.threads)
            self.pair = load_pair(self.cfg.target, self.cfg.draft, device=self.cfg.device, dtype=self.cfg.dtype)
        if len(self.record_engines()) > 1:
            from specaudit.engines.local import LocalExecutor

            self.engines = LocalExecutor(self.cfg, pair=self.pair)
            self.engines.start(folder)
        return {"models": self.pair.manifest(), "device": device_entry(self.pair), "versions": library_versions()}

    def execute(self, folder: RunFolder, items: list[PlanItem], emit: Emit) -> None:
        import os

        import torch

        screen_items = [item for item in items if item.engine == SCREEN_ENGINE]
        threads = int(self.cfg.extra.get("screen_threads") or os.cpu_count() or 1)
        if screen_items:
            torch.set_num_threads(threads if self.pair.device.type == "cpu" else self.cfg.threads)
            try:
                self.screen(folder, screen_items, emit)
            finally:
                torch.set_num_threads(self.cfg.threads)
        engine_items = [item for item in items if item.engine != SCREEN_ENGINE]
        if engine_items:
            self.engines.execute(folder, engine_items, emit)

    def screen(self, folder: RunFolder, items: list[PlanItem], emit: Emit) -> None:
        from specaudit.decoding._shapes import parse_branching, parse_children
        from specaudit.engines.screen import screen_paths
        from specaudit.engines.screen._batching import DEFAULT_BATCH_ROWS, DEFAULT_BATCH_TOKENS, token_batches
        from specaudit.models import DisparityPlant

        pair, cfg = self.pair, self.cfg
        plant = DisparityPlant.parse(cfg.plant_disparity) if cfg.plant_disparity else None
        eos_ids = eos_token_ids(pair)
        pad_id = pad_token_id(pair, eos_ids)
        encoded = {p.id: prompt_token_ids(pair.tokenizer, p, cfg.chat_template) for p in folder.prompt_set.prompts}
        check_prompt_lengths(encoded, pair.target, cfg.max_new_tokens, draft=pair.draft)
        batch_size = _positive_setting(cfg.extra, "screen_batch", DEFAULT_BATCH_ROWS)
        batch_tokens = _positive_setting(cfg.extra, "screen_batch_tokens", DEFAULT_BATCH_TOKENS)
        # Timing repeats mean nothing without an engine to time. Similar lengths share a batch
        # (less padding), long prompts fewer to a batch; a row's tokens do not depend on its batch-mates.
        todo = [item for item in items if not item.timing_only]
        # beside the tree engine, the tree's expected counts along each path (stats.shape_screen)
        shape = cfg.engine_settings("tree")
        tree = (parse_branching(shape["branching"]), parse_children(shape["children"])) if "tree" in cfg.engines else None
        lengths = [len(encoded[item.prompt.id]) for item in todo]
        for number, indices in enumerate(token_batches(lengths, cfg.max_new_tokens, max_rows=batch_size, max_tokens=batch_tokens)):
            chunk = [todo[i] for i in indices]
            seeds = [derive_seed(cfg.seed, item.prompt.id, item.sample) for item in chunk]
            prompts = [encoded[item.prompt.id] for item in chunk]
            paths = screen_paths(
                pair.target,
                pair.draft,
                prompts,
                seeds,
                spec=cfg.sampling,
                k=cfg.k,
                max_new_tokens=cfg.max_new_tokens,
                eos_ids=eos_ids,
                vocab_size=pair.vocab_size,
                pad_id=pad_id,
                batch_size=len(chunk),
                check_draft=number == 0,
                plant=plant,
                planted=[plant is not None and plant.applies_to(item.prompt.attributes) for item in chunk],
                tree=tree,
            )
            for item, seed, prompt_ids, path in zip(chunk, seeds, prompts, paths, strict=True):
                emit(screen_record(cfg, item, seed, prompt_ids, path, pair.tokenizer.decode(path.tokens, skip_special_tokens=True)))


def _positive_setting(extra: dict, name: str, default: int) -> int:
    value = extra.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"extra.{name} must be an integer >= 1, got {value!r}")
    return value
