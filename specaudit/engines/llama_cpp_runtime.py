"""llama.cpp in this process (through llama-cpp-python): GGUF files, the context sized to the prompts,
decoding and logits (its settings section, extra.llama_cpp, is llama_cpp_settings).

Shared: the llama-cpp engine decodes with it, llama-speculative its plain side, llama-server and
llama-speculative score with its `scoring_pair`, llama-server takes its seeds, OpenVINO its vocabulary
check, and mitigate times policies with `run_decoder`. What follows is how `--engines llama-cpp` decodes.

The target is a GGUF file (default: the embedded SmolLM2 file, as it is: Q4_1). Two llama.cpp
contexts answer the plan, interleaved as local runs:
- "vanilla": plain decoding (`Llama.generate` without a draft, logits for the last token only,
  as llama.cpp users run it);
- "speculative": `Llama.generate` with a draft hook (`draft_model=`): prompt lookup
  (`--draft ngram`: the binding's `LlamaPromptLookupDecoding`, k tokens, n-grams up to 3 as
  specaudit.models.NgramDraft) or a second GGUF file proposing k greedy tokens (`GgufDraft`,
  ours; the binding has no draft-model class). Verification is always the binding's: the drafts
  are evaluated in one batch, the sampler draws at each drafted position and keeps drafts while
  its draw equals them. That keeps the target's distribution whatever the draft proposes,
  provided the batched logits equal the single-token ones, which is what the audit tests.

Sampling is llama.cpp's own chain, set explicitly: top-k, top-p and temperature from the run,
every other stage neutral (min_p 0, typical_p 1, repeat/frequency/presence penalties off,
mirostat off, no grammar, no logits processor); the manifest records the whole chain. llama.cpp
applies top-p before temperature (transformers and specaudit after), so a run with both
temperature != 1 and top-p < 1 is refused: llama.cpp would sample another distribution.
Each record's seed is runner.derive_seed cut to llama.cpp's 32-bit seed (`llama_seed`).
Every generation starts from an empty KV cache (no prefix reuse between records), so a record
does not depend on the order of the plan.

Per-step acceptance is observed by wrapping the draft callable: each call's proposal is compared
with the tokens the target kept at those positions. `draft_s` is the time inside the draft,
`verify_s` the rest of the generation (target evaluation and sampling). With a draft GGUF each
speculative record also carries `position_beta` (`path_acceptance`): Σ min(p, q) at each output
position, the acceptance rejection sampling would reach, beside the rule's own counts. The same
function gives the screen beside llama.cpp (`--engines screen,llama-cpp`, executor.py) its
expected counts along plain decoding's samples.

analyze scores these runs with llama.cpp's own logits (`scoring_pair`): the target GGUF
teacher-forced over prompt + output with `logits_all`, warped with specaudit.decoding.warp.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.engines.external_logits import ExternalLogits, ScoringPair
from specaudit.engines.llama_cpp_settings import DEFAULT_CONTEXT, backend_settings, context_is_explicit
from specaudit.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import ModuleType

    from specaudit.config import RunConfig
    from specaudit.decoding import Generation, SamplingSpec
    from specaudit.prompts import Prompt
    from specaudit.stats.acceptance import PathAcceptance

GGUF_MAGIC = b"GGUF"
RANDOM_SEED = 0xFFFFFFFF  # llama.cpp seeds are uint32 and this one means "draw a random seed"
NGRAM_MAX = 3  # as specaudit.models.NgramDraft
CONTEXT_STEP = 256  # a sized context is rounded up to this (llama.cpp pads its KV cache to 256 anyway)
# The stages of llama.cpp's sampler chain that the run does not use, all neutral.
NEUTRAL_SAMPLERS: dict[str, Any] = {
    "min_p": 0.0,
    "typical_p": 1.0,
    "repeat_penalty": 1.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "tfs_z": 1.0,
    "mirostat_mode": 0,
    "grammar": None,
    "logits_processor": None,
}


# ----------------------------------------------------------------------------- checks
def import_llama_cpp() -> ModuleType:
    try:
        import llama_cpp
    except ImportError:
        raise InputError(
            "--engines llama-cpp needs llama-cpp-python, which is not installed here; "
            "install specaudit[llama-cpp] (it builds llama.cpp from source, ~12 CPU-minutes)"
        ) from None
    return llama_cpp


def gguf_file(name: str, role: str = "--target") -> Path:
    """The GGUF file a run names (`default`: the embedded SmolLM2 file; a named model: its file,
    fetched on first use), checked to be one."""
    from specaudit.models._loading import DEFAULT_TARGET, embedded_gguf_path
    from specaudit.models._named import is_named, resolve

    if name == DEFAULT_TARGET:
        path = embedded_gguf_path()
    else:
        path = resolve(name) if is_named(name) else Path(name).expanduser()
    if not path.is_file():
        raise InputError(f"{role} {name!r}: no such file; with --engines llama-cpp name a GGUF file (or `default`)")
    with open(path, "rb") as handle:
        if handle.read(4) != GGUF_MAGIC:
            raise InputError(
                f"{role} {str(path)!r} is not a GGUF file (it does not start with the GGUF magic); llama.cpp reads GGUF models only"
            )
    return path


def draft_gguf(cfg: RunConfig) -> Path | None:
    """The draft GGUF a run names: None for prompt lookup (`--draft ngram`), the target's own file
    for `--draft target` (the identity check: llama.cpp then drafts with a second context of the
    target), else the named file."""
    from specaudit.contracts.engines import IDENTITY_DRAFT

    draft = str(cfg.draft)
    if draft == "ngram":
        return None
    return gguf_file(str(cfg.target)) if draft == IDENTITY_DRAFT else gguf_file(draft, "--draft")


def gguf_vocabulary(path: Path) -> list[str]:
    """The token strings of a GGUF file, read from its metadata without loading the model."""
    from gguf import GGUFReader

    try:
        tokens = GGUFReader(str(path)).fields.get("tokenizer.ggml.tokens")
    except (ValueError, OSError) as error:
        raise InputError(f"{str(path)!r} could not be read as GGUF ({error})") from None
    if tokens is None:
        raise InputError(f"{str(path)!r} has no tokenizer.ggml.tokens; it carries no vocabulary to check against the target's")
    return [bytes(tokens.parts[index]).decode("utf-8", errors="replace") for index in tokens.data]


def check_draft_vocabulary(target: Path, draft: Path) -> None:
    target_vocab, draft_vocab = gguf_vocabulary(target), gguf_vocabulary(draft)
    if target_vocab != draft_vocab:
        differing = sum(1 for a, b in zip(target_vocab, draft_vocab) if a != b) + abs(len(target_vocab) - len(draft_vocab))
        raise InputError(
            f"draft {str(draft)!r} has another vocabulary than target {str(target)!r} ({len(draft_vocab)} vs "
            f"{len(target_vocab)} tokens, {differing} differing); speculative decoding needs the same tokenizer"
        )


def sampler_settings(spec: SamplingSpec) -> dict:
    """Keyword arguments of `Llama.generate` for a SamplingSpec: the whole chain, explicit."""
    if spec.greedy:
        return {"temp": 0.0, "top_k": 0, "top_p": 1.0, **NEUTRAL_SAMPLERS}  # temp 0: llama.cpp's greedy sampler
    if spec.temperature != 1.0 and spec.top_p < 1.0:
        raise InputError(
            f"temperature {spec.temperature:g} with top-p {spec.top_p:g}: llama.cpp applies top-p before temperature "
            "(specaudit after), so it would sample another distribution; use top-p 1 or temperature 1 with --engines llama-cpp"
        )
    return {"temp": float(spec.temperature), "top_k": int(spec.top_k), "top_p": float(spec.top_p), **NEUTRAL_SAMPLERS}


def llama_seed(seed: int) -> int:
    """The record's seed as llama.cpp's uint32: its low 32 bits, which is also what the binding's
    server passes on for a request's 63-bit seed, so both give the same draws."""
    low = int(seed) & 0xFFFFFFFF
    return low if low != RANDOM_SEED else 0


def check_config(cfg: RunConfig) -> None:
    """Everything llama.cpp cannot honour, said before anything loads."""
    if cfg.verify:
        raise InputError(
            "--verify plugs a rejection step into specaudit's speculative engine; llama.cpp uses its own, so drop --verify "
            "with --engines llama-cpp"
        )
    if getattr(cfg, "plant_disparity", None):
        raise InputError(
            "--plant-disparity changes specaudit's draft; llama.cpp's draft cannot be changed, so drop it with --engines llama-cpp"
        )
    from specaudit.contracts.engines import IDENTITY_DRAFT
    from specaudit.models._named import is_named

    draft = str(cfg.draft)
    if draft not in ("ngram", IDENTITY_DRAFT) and not draft.endswith(".gguf") and not is_named(draft):
        raise InputError(
            f"--draft {draft}: with --engines llama-cpp the draft is ngram (llama.cpp prompt lookup), a GGUF file "
            "sharing the target's vocabulary, a named model (`specaudit models list`), or target (the identity check)"
        )
    sampler_settings(cfg.sampling)


def gguf_context_length(path: Path) -> int | None:
    """The context a GGUF model was trained for (`<architecture>.context_length`), read without loading it."""
    from gguf import GGUFReader

    try:
        fields = GGUFReader(str(path)).fields
    except (ValueError, OSError) as error:
        raise InputError(f"{str(path)!r} could not be read as GGUF ({error})") from None

    def scalar(name: str) -> Any:
        field = fields.get(name)
        return None if field is None or not field.data else field.parts[field.data[0]]

    architecture = scalar("general.architecture")
    if architecture is None:
        return None
    length = scalar(f"{bytes(architecture).decode('utf-8', errors='replace')}.context_length")
    return int(length[0]) if length is not None else None


def sized_settings(cfg: RunConfig, encoded: dict[str, list[int]], models: dict[str, Path]) -> dict:
    """backend_settings with the context sized to the run, checked before anything loads.

    A generation occupies the prompt, max_new_tokens and the k tokens the binding's draft hook
    proposes past the last one (it does not know the budget). Without extra.llama_cpp.n_ctx the
    context is that, for the longest prompt, rounded up to CONTEXT_STEP and at least
    DEFAULT_CONTEXT; a context beyond what a model (`models`: role -> GGUF) was trained for, or
    an explicit n_ctx too small, is refused naming the prompt, its length and the limit."""
    from specaudit.execution.preflight import check_fits, context_needed, longest_prompt

    settings = backend_settings(cfg)
    k = cfg.k  # every run has the speculative context beside the vanilla one
    for role, path in models.items():
        trained = gguf_context_length(path)
        if trained is not None:
            check_fits(encoded, trained, f"the context {role} {path.name} was trained for", cfg.max_new_tokens, k)
    if context_is_explicit(cfg):
        check_fits(encoded, settings["n_ctx"], "extra.llama_cpp.n_ctx", cfg.max_new_tokens, k)
    elif encoded:
        needed = context_needed(longest_prompt(encoded)[1], cfg.max_new_tokens, k)
        settings["n_ctx"] = max(DEFAULT_CONTEXT, -(-needed // CONTEXT_STEP) * CONTEXT_STEP)
    return settings


# ----------------------------------------------------------------------------- evaluation
def eval_tokens(llm: Any, tokens: list[int], *, logits_from: int = 0) -> None:
    """`llm.eval(tokens)` on a `logits_all` context, keeping logits only for tokens[logits_from:].

    Such a context computes and copies the logits of every position it evaluates; at 151,936 tokens
    the output layer is a large share of a small model's work (the 0.5B Qwen draft's 80-token
    prefill: 1.78 s with every position's logits, 0.93 s with the last only). llama-cpp-python
    decides per call from its `_logits_all` flag, so the positions before `logits_from` are
    evaluated with it off (their logits are neither computed nor stored)."""
    keep = llm._logits_all
    try:
        if logits_from > 0:
            llm._logits_all = False
            llm.eval(tokens[:logits_from])
        llm._logits_all = True
        llm.eval(tokens[logits_from:])
    finally:
        llm._logits_all = keep


def teacher_forced_logits(llm: Any, prompt_ids: list[int], tokens: list[int]) -> np.ndarray:
    """[len(tokens), V] float64 logits of a `logits_all` context along prompt + tokens from an empty
    KV cache, row t predicting tokens[t]; the prompt's own positions get no logits."""
    llm.reset()
    ids = [*prompt_ids, *tokens[:-1]]
    first = len(prompt_ids) - 1  # the logits at the prompt's last position predict tokens[0]
    eval_tokens(llm, ids, logits_from=first)
    return np.array(llm.scores[first : first + len(tokens)], dtype=np.float64)


def stepwise_logits(llm: Any, prompt_ids: list[int], tokens: list[int]) -> np.ndarray:
    """As teacher_forced_logits, with the call shapes of plain decoding: the prompt in one batch
    whose last position alone gets logits, then one token a call. llama.cpp's logits depend on the
    call's shape (a batch is rounded otherwise than one token: on the embedded Q4_1 file one model's
    distributions differ by TV up to ~0.06 between the two), so distributions compared with plain
    decoding's are made the way plain decoding made its own."""
    llm.reset()
    vocab = llm.n_vocab()
    rows = []
    keep = llm._logits_all
    try:
        llm._logits_all = False  # the binding then asks llama.cpp for the last position's logits only, and stores none
        for chunk in (prompt_ids, *([token] for token in tokens[:-1])):
            llm.eval(chunk)
            rows.append(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,)).astype(np.float64))
    finally:
        llm._logits_all = keep
    return np.stack(rows)


# ----------------------------------------------------------------------------- drafts
class GgufDraft:
    """A second GGUF model as llama-cpp-python's draft hook: k greedy tokens per call, its KV
    cache kept across calls of one generation (reused up to the longest common prefix)."""

    def __init__(self, path: Path, k: int, *, n_ctx: int, n_threads: int) -> None:
        llama_cpp = import_llama_cpp()
        self.k = k
        self.model = llama_cpp.Llama(
            model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads, logits_all=True, verbose=False
        )

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        model = self.model
        ids = [int(t) for t in input_ids]
        cached = model.input_ids[: model.n_tokens].tolist()
        common = next((i for i, (a, b) in enumerate(zip(cached, ids)) if a != b), min(len(cached), len(ids)))
        start = min(common, len(ids) - 1)  # at least one token is evaluated, so its logits are fresh
        model.n_tokens = start
        eval_tokens(model, ids[start:], logits_from=len(ids) - 1 - start)  # the proposal needs the last position's logits only
        proposal = []
        for _ in range(self.k):
            token = int(np.argmax(model.scores[model.n_tokens - 1]))
            proposal.append(token)
            model.eval([token])
        return np.asarray(proposal, dtype=np.intc)


@dataclass
class ObservedDraft:
    """Wraps a draft callable: what it proposed at which sequence position, and its time."""

    inner: Any
    calls: list[tuple[int, list[int]]] = field(default_factory=list)
    seconds: float = 0.0

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        start = time.perf_counter()
        proposal = self.inner(input_ids, **kwargs)
        self.seconds += time.perf_counter() - start
        self.calls.append((len(input_ids), [int(t) for t in proposal]))
        return proposal

    def reset(self) -> None:
        self.calls, self.seconds = [], 0.0


def acceptance_per_step(
    calls: list[tuple[int, list[int]]], prompt_length: int, output: list[int], max_new_tokens: int
) -> tuple[list[int], list[int]]:
    """(proposed, accepted) per verification step, from the draft's calls. The first step is the
    prompt pass, which the binding runs without a draft: (0, 0).

    A call at sequence position n proposed the tokens for output positions j = n − prompt_length
    onwards; the step it started emitted output[j] and the drafts the sampler kept, so accepted
    = the length of the common prefix of the proposal and output[j:]. Proposals are counted up
    to the length budget (drafts past it could never be emitted)."""
    proposed, accepted = [0], [0]
    for n, proposal in calls:
        j = n - prompt_length
        if j < 0 or j >= len(output):
            continue  # a call whose step emitted nothing the record kept
        offered = proposal[: max(max_new_tokens - j, 0)]
        kept = 0
        while kept < len(offered) and j + kept < len(output) and offered[kept] == output[j + kept]:
            kept += 1
        proposed.append(len(offered))
        accepted.append(kept)
    return proposed, accepted


# ----------------------------------------------------------------------------- generation
@dataclass
class Engines:
    """The two llama.cpp contexts of a run and what they need to decode."""

    vanilla: Any
    speculative: Any
    draft: ObservedDraft
    eos_ids: set[int]


@dataclass
class Loaded:
    """What an in-process llama.cpp executor loads first (llama-cpp, and llama-speculative's control)."""

    llama_cpp: ModuleType
    sampler: dict  # Llama.generate's keyword arguments of the run's sampling
    tokenizer: Any
    encoded: dict[str, list[int]]  # prompt id -> token ids
    settings: dict  # sized_settings: the context fits every prompt

    def versions(self) -> dict[str, Any]:
        from specaudit.engines.decode import library_versions

        return {**library_versions(), "llama_cpp_python": self.llama_cpp.__version__}


def load(cfg: RunConfig, prompts: Iterable[Prompt], models: dict[str, Path]) -> Loaded:
    """The binding, the run's sampler chain, the target's tokenizer, the prompts' ids and the
    settings sized to them (`models`: role -> GGUF whose trained context each prompt must fit)."""
    from specaudit.models import load_tokenizer
    from specaudit.prompts import prompt_token_ids

    llama_cpp = import_llama_cpp()
    sampler = sampler_settings(cfg.sampling)
    tokenizer = load_tokenizer(str(cfg.target))
    encoded = {p.id: prompt_token_ids(tokenizer, p, cfg.chat_template) for p in prompts}
    return Loaded(llama_cpp, sampler, tokenizer, encoded, sized_settings(cfg, encoded, models))


def gguf_entry(name: str, path: Path) -> dict[str, Any]:
    """A model's entry in the manifest: its name as the run gave it, its file and the file's hash."""
    from specaudit.models._loading import file_sha256

    return {"name": name, "gguf": str(path), "gguf_sha256": file_sha256(path)}


def load_engines(cfg: RunConfig, target: Path, settings: dict, *, tokenizer: Any = None, speculative: bool = True) -> Engines:
    """The plain context (and with `speculative` the drafting one and its draft), the end-of-sequence
    ids of the model and of the `tokenizer`."""
    llama_cpp = import_llama_cpp()
    common = dict(
        model_path=str(target),
        n_ctx=settings["n_ctx"],
        n_batch=settings["n_batch"],
        n_threads=settings["n_threads"],
        n_threads_batch=settings["n_threads"],
        verbose=False,
    )
    vanilla = llama_cpp.Llama(logits_all=False, **common)
    engines = Engines(vanilla, None, ObservedDraft(None), {int(vanilla.token_eos())})
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        engines.eos_ids.add(int(tokenizer.eos_token_id))
    if not speculative:
        return engines
    draft_path = draft_gguf(cfg)
    if draft_path is None:
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        inner = LlamaPromptLookupDecoding(max_ngram_size=NGRAM_MAX, num_pred_tokens=cfg.k)
    else:
        check_draft_vocabulary(target, draft_path)
        inner = GgufDraft(draft_path, cfg.k, n_ctx=settings["n_ctx"], n_threads=settings["draft_threads"])
    engines.draft = ObservedDraft(inner)
    # logits_all=True, though the binding turns it on itself for a draft: llama-cpp-python (0.3.x)
    # sizes its score buffer from the argument (n_batch rows when False), so any prompt longer
    # than n_batch overflowed it ("could not broadcast ... into shape (0,)").
    engines.speculative = llama_cpp.Llama(draft_model=engines.draft, logits_all=True, **common)
    return engines


def generate(
    engines: Engines,
    engine: str,
    prompt_ids: list[int],
    sampler: dict,
    seed: int,
    max_new_tokens: int,
    k: int,
    *,
    logits: list[np.ndarray] | None = None,
) -> Generation:
    """One record's decoding with llama.cpp: a specaudit.decoding.Generation. `logits`: a list that
    receives, for plain decoding, the raw logits each output token was sampled from ([V] float32
    in token-id order), read by a pass-through first stage of the sampler chain (it changes no
    logit and draws no random number, so the tokens are those of the same seed without it)."""
    from specaudit.decoding import Generation

    llm = engines.vanilla if engine == CONTROL_ENGINE else engines.speculative
    llm.reset()  # an empty KV cache: no prefix reuse from the previous record
    llm.set_seed(llama_seed(seed))
    engines.draft.reset()
    if logits is not None:
        if engine != CONTROL_ENGINE:
            raise ValueError("logits are read from plain decoding only")
        sampler = {**sampler, "logits_processor": [_LogitsReader(logits)]}
    tokens: list[int] = []
    finish, ttft = "length", None
    start = time.perf_counter()
    for token in llm.generate(prompt_ids, reset=True, **sampler):
        if ttft is None:
            ttft = time.perf_counter() - start
        tokens.append(int(token))
        if token in engines.eos_ids:
            finish = "eos"
            break
        if len(tokens) >= max_new_tokens:
            break
    wall = time.perf_counter() - start
    common = dict(tokens=tokens, finish_reason=finish, wall_s=wall, ttft_s=ttft if ttft is not None else wall)
    if engine == CONTROL_ENGINE:
        return Generation(steps=len(tokens), draft_s=0.0, verify_s=wall, **common)
    proposed, accepted = acceptance_per_step(engines.draft.calls, len(prompt_ids), tokens, max_new_tokens)
    return Generation(
        steps=len(proposed),
        proposed=sum(proposed),
        accepted=sum(accepted),
        proposed_per_step=proposed,
        accepted_per_step=accepted,
        draft_s=engines.draft.seconds,
        verify_s=wall - engines.draft.seconds,
        **common,
    )


@dataclass
class _LogitsReader:
    """A logits processor that keeps a copy of the logits it is given and returns them unchanged."""

    into: list[np.ndarray]

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        self.into.append(np.array(scores, dtype=np.float32, copy=True))
        return scores


def path_acceptance(
    engines: Engines,
    prompt_ids: list[int],
    tokens: list[int],
    spec: SamplingSpec,
    max_new_tokens: int,
    *,
    target_logits: np.ndarray | None = None,
) -> PathAcceptance | None:
    """What each output position of a path would accept, with p the target's and q the draft GGUF's
    distributions teacher-forced by llama.cpp over prompt + path and warped with the run's setting
    (float64: a float32 softmax over 151,936 tokens sums to 1 ± 1e-5):

    - β_t = Σ min(p_t, q_t): what rejection sampling would accept there (the portable α);
    - a_t = p_t(g_t), g_t = argmax q_t (the draft's raw logits, as `GgufDraft` proposes): the chance
      that this engine's own rule keeps the draft there (the target's draw equals the greedy
      draft), given the prefix.

    The counts are the rule's expected steps, proposed and accepted along the path with llama.cpp's
    step structure at the run's length budget (`stats.acceptance.prompt_pass_counts`), taking the
    positions' acceptances as independent given the path. `target_logits` [len(tokens), V]: the target's logits along the path
    where plain decoding already gave them (the screen's), the draft's then made with the same call
    shapes (`stepwise_logits`); otherwise both are teacher-forced here in one batch each. None for
    the n-gram draft (it has no q). Run outside any timing."""
    import torch

    from specaudit.decoding.warping import warp
    from specaudit.stats.acceptance import PathAcceptance, prompt_pass_counts

    draft = engines.draft.inner
    if not isinstance(draft, GgufDraft) or not tokens:
        return None
    if target_logits is None:
        target_logits = teacher_forced_logits(engines.speculative, prompt_ids, tokens)
        draft_logits = teacher_forced_logits(draft.model, prompt_ids, tokens)
    else:
        draft_logits = stepwise_logits(draft.model, prompt_ids, tokens)
    p = warp(torch.from_numpy(np.asarray(target_logits, dtype=np.float64)), spec)
    q = warp(torch.from_numpy(draft_logits), spec)
    beta = torch.minimum(p, q).sum(dim=-1)
    rule = p.gather(-1, torch.from_numpy(draft_logits.argmax(axis=-1))[:, None]).squeeze(-1)
    accept = [float(a) for a in rule]
    steps, proposed, accepted, reached = prompt_pass_counts(accept, draft.k, max_new_tokens)
    return PathAcceptance(steps, proposed, accepted, reached, beta=[float(b) for b in beta], accept_cond=accept)


def _system_info(llama_cpp: ModuleType) -> str | None:
    try:
        return llama_cpp.llama_print_system_info().decode()
    except (AttributeError, UnicodeDecodeError):
        return None


# ----------------------------------------------------------------------------- scoring
class LlamaCppLogits(ExternalLogits):
    """llama.cpp's target as a scoring model (engines.external_logits): each row teacher-forced
    through llama.cpp with `logits_all` from an empty KV cache, so the scores are llama.cpp's own."""

    # The engine computed its logits in other batch shapes (and, for llama-server, in another
    # process): llama.cpp's logits for one prefix differ between batch shapes by up to 5.4% of the
    # row's max |logit| on the embedded Q4_1 GGUF (docs/llama-cpp.md), enough to move a token across
    # a top-k / top-p / min-p boundary. An emitted token within 6% of it is near_boundary (scoring).
    boundary_rel_tolerance = 0.06

    def __init__(self, path: Path, *, n_ctx: int = DEFAULT_CONTEXT, n_threads: int = 1) -> None:
        llama_cpp = import_llama_cpp()
        self.path = path
        self.llm = llama_cpp.Llama(
            model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads, logits_all=True, verbose=False
        )
        self.vocab_size = self.llm.n_vocab()

    def sequence_logits(self, ids: list[int]) -> np.ndarray:
        """[len(ids), V] float32 logits, position t predicting token t + 1."""
        if len(ids) > self.llm.n_ctx():
            raise InputError(
                f"a scored sequence of {len(ids)} tokens exceeds llama.cpp's context of {self.llm.n_ctx()}; raise extra.llama_cpp.n_ctx"
            )
        self.llm.reset()
        self.llm.eval(ids)
        return np.array(self.llm.scores[: len(ids)], copy=True)


def _run_target(manifest: dict, use: str) -> Path:
    """The target GGUF of a llama.cpp run folder, checked against the sha256 its manifest recorded."""
    from specaudit.models._loading import file_sha256

    config = manifest.get("config") or {}
    target_entry = (manifest.get("models") or {}).get("target") or {}
    path = gguf_file(str(config.get("target", "default")))
    if target_entry.get("gguf_sha256") and file_sha256(path) != target_entry["gguf_sha256"]:
        raise InputError(
            f"{str(path)!r} is not the GGUF file this run decoded with (its sha256 differs from the manifest's); {use} with the same file"
        )
    return path


def run_decoder(manifest: dict, *, max_new_tokens: int) -> Callable[[list[int], int, int], tuple[float, int]]:
    """The plain and speculative engines of a llama.cpp run folder, with its settings, as one timed
    decoding (prompt ids, k, seed) -> (wall seconds, output tokens), plain at k = 0 and with the
    run's draft proposing k tokens otherwise (mitigate's policy re-audit times the run's engines)."""
    from specaudit.config import RunConfig

    cfg = RunConfig(**(manifest.get("config") or {}))
    engines = load_engines(cfg, _run_target(manifest, "re-audit the run"), (manifest.get("llama_cpp") or {})["settings"])
    sampler = sampler_settings(cfg.sampling)

    def decode(prompt_ids: list[int], k: int, seed: int) -> tuple[float, int]:
        draft = engines.draft.inner
        if isinstance(draft, GgufDraft):
            draft.k = k
        else:  # the binding's prompt lookup
            draft.num_pred_tokens = k
        engine = CONTROL_ENGINE if k == 0 else SPECULATIVE_ENGINE
        generation = generate(engines, engine, prompt_ids, sampler, seed, max_new_tokens, k)
        return generation.wall_s, len(generation.tokens)

    return decode


def scoring_pair(manifest: dict, device: str | None = None) -> ScoringPair:
    """The scoring pair of a llama.cpp run folder: its target GGUF (checked against the sha256
    the manifest recorded) and its tokenizer."""
    import torch

    from specaudit.models import load_tokenizer

    config = manifest.get("config") or {}
    path = _run_target(manifest, "score the run")
    settings = (manifest.get("llama_cpp") or {}).get("settings") or {}
    target = LlamaCppLogits(path, n_ctx=int(settings.get("n_ctx", DEFAULT_CONTEXT)), n_threads=int(settings.get("n_threads", 1)))
    return ScoringPair(
        target=target,
        tokenizer=load_tokenizer(str(config.get("target", "default"))),
        vocab_size=target.llm.n_vocab(),
        device=torch.device("cpu"),
    )


__all__ = [
    "GgufDraft",
    "LlamaCppLogits",
    "NEUTRAL_SAMPLERS",
    "ObservedDraft",
    "acceptance_per_step",
    "check_draft_vocabulary",
    "gguf_file",
    "path_acceptance",
    "run_decoder",
    "sampler_settings",
    "scoring_pair",
]
