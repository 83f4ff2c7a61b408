"""Models: targets and drafts by hub id, folder or GGUF file; the embedded default; derived drafts."""

from specaudit.models._device import Stopwatch, forward_cached, resolve_device, resolve_dtype
from specaudit.models._loading import (
    DEFAULT_TARGET,
    ModelPair,
    NgramDraft,
    NoisyDraft,
    check_same_vocabulary,
    default_target_folder,
    early_exit_draft,
    int8_draft,
    load_pair,
    load_tokenizer,
    parse_draft_noise,
)
from specaudit.models._tiny import save_tiny_pair, tiny_draft_of, tiny_model, tiny_tokenizer

__all__ = [
    "DEFAULT_TARGET",
    "ModelPair",
    "NgramDraft",
    "NoisyDraft",
    "Stopwatch",
    "check_same_vocabulary",
    "default_target_folder",
    "early_exit_draft",
    "forward_cached",
    "int8_draft",
    "load_pair",
    "load_tokenizer",
    "parse_draft_noise",
    "resolve_device",
    "resolve_dtype",
    "save_tiny_pair",
    "tiny_draft_of",
    "tiny_model",
    "tiny_tokenizer",
]
