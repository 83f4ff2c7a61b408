"""The llama-speculative executor (`--engines llama-speculative`): llama.cpp's `speculative`
example, its own tree drafting and stochastic verification, audited as a third-party engine.

- "speculative": one `llama-speculative` process per (prompt, sample) (process.py), the target
  GGUF with `-md` the draft (default `--draft target`, the identity draft), the command of
  command.py; the emitted ids and per-step counts read from its debug log (log.py), checked
  against the text it prints (a mismatch is an engine fault), cut to the budget (generation.py).
- "vanilla": the control, llama.cpp's plain decoding of the same GGUF in process
  (llama-cpp-python, the same llama.cpp revision as the binary, built from its sdist), with the
  same sampler chain; as `--engines llama-cpp` runs it.

The prompt is given as text: the target's chat-templated ids detokenised with their special
tokens, which the program tokenises back with special tokens parsed (common_tokenize(..., true,
true)); start() checks that every prompt's text tokenises back to exactly its ids, and each run's
stdout must start with that text. analyze scores both engines with the target GGUF's own logits
(llama_cpp_runtime.scoring_pair; its settings, extra.llama_cpp sized to the prompts, are in the manifest's
`llama_cpp` section).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specaudit.contracts.engines import IDENTITY_DRAFT
from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE, PlanItem, Record
from specaudit.engines.decode import make_record
from specaudit.engines.llama_build import SPECULATIVE, binding_version, build_info, require_binary
from specaudit.engines.llama_cpp_runtime import (
    check_draft_vocabulary,
    draft_gguf,
    generate,
    gguf_entry,
    gguf_file,
    llama_seed,
    load,
    load_engines,
)
from specaudit.engines.llama_speculative.command import NEUTRAL_FLAGS, SAMPLERS, command
from specaudit.engines.llama_speculative.generation import generation_of
from specaudit.engines.llama_speculative.log import LogError, generated_output, parse
from specaudit.engines.llama_speculative.process import run
from specaudit.engines.llama_speculative.settings import speculative_settings
from specaudit.errors import EngineError, InputError
from specaudit.execution.base import Emit, Executor
from specaudit.execution.faults import attempt
from specaudit.execution.folder import RunFolder
from specaudit.execution.plan import derive_seed

if TYPE_CHECKING:
    from specaudit.decoding import Generation

BACKEND = "llama-speculative"


class LlamaSpeculativeExecutor(Executor):
    label, unit = "decoding (llama-speculative)", "rec"

    def record_engines(self) -> tuple[str, ...]:
        return (CONTROL_ENGINE, SPECULATIVE_ENGINE)

    def check(self, folder: RunFolder) -> None:
        cfg = self.cfg
        self.options = speculative_settings(cfg.extra)
        if cfg.verify or getattr(cfg, "plant_disparity", None):
            raise InputError("--verify and --plant-disparity change specaudit's own engine; drop them with --engines llama-speculative")
        if str(cfg.draft) == "ngram":
            raise InputError("--engines llama-speculative drafts with a model: --draft target (the identity draft) or a GGUF file")
        if not cfg.sampling.greedy and cfg.sampling.temperature != 1.0 and cfg.sampling.top_p < 1.0:
            raise InputError(
                f"temperature {cfg.sampling.temperature:g} with top-p {cfg.sampling.top_p:g}: the llama.cpp control applies top-p "
                "before temperature (specaudit after); use top-p 1 or temperature 1 with --engines llama-speculative"
            )
        self.target = gguf_file(str(cfg.target))
        self.draft = draft_gguf(cfg)
        if self.draft != self.target:
            check_draft_vocabulary(self.target, self.draft)
        self.binary = require_binary(SPECULATIVE)
        previous = folder.previous
        folder.require_backend(BACKEND, "llama-speculative")
        if previous and (previous.get(BACKEND) or {}).get("settings") != self.options.model_dump(mode="json"):
            raise InputError(f"{folder.out_dir} was run with other llama_speculative settings; re-run them or choose a new --out")

    def start(self, folder: RunFolder) -> dict:
        cfg = self.cfg
        loaded = load(cfg, folder.prompt_set.prompts, {"target": self.target})
        self.sampler, self.tokenizer, self.encoded, self.settings = loaded.sampler, loaded.tokenizer, loaded.encoded, loaded.settings
        self.threads = self.options.threads or cfg.threads
        self.engines = load_engines(cfg, self.target, self.settings, tokenizer=self.tokenizer, speculative=False)
        self.prompt_text = {key: self._prompt_text(key, ids) for key, ids in self.encoded.items()}
        # -np sequences each hold the prompt and the output: the context is one sequence's times n_parallel
        self.ctx = self.settings["n_ctx"] * self.options.n_parallel
        identity = self.draft == self.target and str(cfg.draft) == IDENTITY_DRAFT
        return {
            "versions": {**loaded.versions(), "llama_cpp_python_sources": binding_version()},
            "models": {
                "target": gguf_entry(str(cfg.target), self.target),
                "draft": {
                    **gguf_entry(str(cfg.draft), self.draft),
                    "k": cfg.k,
                    "identity": identity,
                    "implementation": "llama.cpp examples/speculative (tree drafting, -np branches)",
                },
            },
            "device": {"type": "cpu", "engine": "llama.cpp", "threads": self.threads},
            "backend": BACKEND,
            "llama_cpp": {"settings": self.settings, "kv_cache": "cleared before every record"},  # the control, and scoring
            BACKEND: {
                "settings": self.options.model_dump(mode="json"),
                "binary": str(self.binary),
                "build": build_info(self.binary),
                "command": command(
                    self.binary,
                    self.target,
                    self.draft,
                    "<prompt>",
                    spec=cfg.sampling,
                    max_new_tokens=cfg.max_new_tokens,
                    seed=0,
                    k=cfg.k,
                    settings=self.options,
                    threads=self.threads,
                    ctx=self.ctx,
                ),
                "sampler_order": [*SAMPLERS.split(";"), "dist"],
                "neutral_sampling": dict(NEUTRAL_FLAGS),
                "seed": "--seed llama_seed = low 32 bits of derive_seed(...) (0xFFFFFFFF becomes 0); the control uses the same seed",
                "ids": "read from the debug log (-lv 5), checked against the program's stdout text and its n_predict / n_accept",
                "control": "llama.cpp's plain decoding in process (llama-cpp-python), the same chain",
            },
        }

    def _prompt_text(self, key: str, ids: list[int]) -> bytes:
        """The prompt as the text the program tokenises back to exactly `ids` (add_special and parse_special, as it does)."""
        model = self.engines.vanilla._model
        text = model.detokenize(ids, special=True)
        back = self.engines.vanilla.tokenize(text, add_bos=True, special=True)
        if back != ids:
            raise InputError(
                f"prompt {key}: its {len(ids)} token ids do not survive the text round trip llama-speculative needs "
                f"({len(back)} ids back); audit it with --engines llama-cpp"
            )
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"prompt {key}: its text is not valid UTF-8, which a command-line prompt must be") from None
        return text

    def execute(self, folder: RunFolder, items: list[PlanItem], emit: Emit) -> None:
        cfg = self.cfg
        if items and cfg.warmup:
            generate(
                self.engines, CONTROL_ENGINE, self.encoded[items[0].prompt.id], self.sampler, cfg.seed, min(8, cfg.max_new_tokens), cfg.k
            )
        for item in items:
            emit(attempt(item, lambda item=item: self._record_of(item), derive_seed(cfg.seed, item.prompt.id, item.sample)))

    def _record_of(self, item: PlanItem) -> Record:
        cfg = self.cfg
        seed = derive_seed(cfg.seed, item.prompt.id, item.sample)
        prompt_ids = self.encoded[item.prompt.id]
        extra: dict[str, Any] = {"backend": BACKEND, "llama_seed": llama_seed(seed)}
        if item.engine == CONTROL_ENGINE:
            generation = generate(self.engines, CONTROL_ENGINE, prompt_ids, self.sampler, seed, cfg.max_new_tokens, cfg.k)
            extra["acceptance_source"] = "none"
        else:
            generation = self._speculative(item.prompt.id, prompt_ids, seed)
            extra["acceptance_source"] = "debug log"
        text = self.tokenizer.decode(generation.tokens, skip_special_tokens=True)
        return make_record(cfg, item, seed, prompt_ids, generation, text).with_extra(**extra)

    def _speculative(self, key: str, prompt_ids: list[int], seed: int) -> Generation:
        cfg = self.cfg
        prompt = self.prompt_text[key]
        argv = command(
            self.binary,
            self.target,
            self.draft,
            prompt.decode("utf-8"),
            spec=cfg.sampling,
            max_new_tokens=cfg.max_new_tokens,
            seed=llama_seed(seed),
            k=cfg.k,
            settings=self.options,
            threads=self.threads,
            ctx=self.ctx,
        )
        finished = run(argv, self.options.timeout_s)
        try:
            log = parse(finished.stderr)
            printed = generated_output(finished.stdout, prompt)
        except LogError as err:
            raise EngineError(f"llama-speculative's log: {err}") from None
        pieces = self.engines.vanilla._model.detokenize(log.tokens, special=True)
        if pieces != printed:
            raise EngineError(
                f"llama-speculative printed {printed[:80]!r} but its debug log names ids whose pieces are {pieces[:80]!r} "
                f"({len(log.tokens)} ids)"
            )
        return generation_of(log, finished, self.engines.eos_ids, cfg.max_new_tokens)

    def close(self) -> None:
        self.engines = None


__all__ = ["BACKEND", "LlamaSpeculativeExecutor"]
