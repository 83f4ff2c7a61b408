"""Models: targets and drafts by hub id, folder or GGUF file; the embedded default; derived drafts.

Loading imports torch and transformers; the names are imported on first use, so that checking a
model name (`_hub`) before any work stays light.
"""

from specaudit._lazy import lazy_exports
from specaudit.models._hub import DEFAULT_TARGET

_LAZY = {
    "DisparityPlant": "specaudit.models._plant",
    "ModelPair": "specaudit.models._loading",
    "NgramDraft": "specaudit.models._loading",
    "PlantedDraft": "specaudit.models._plant",
    "Stopwatch": "specaudit.models._device",
    "check_same_vocabulary": "specaudit.models._loading",
    "default_target_folder": "specaudit.models._loading",
    "early_exit_draft": "specaudit.models._loading",
    "forward_cached": "specaudit.models._device",
    "hf_source": "specaudit.models._loading",
    "int8_draft": "specaudit.models._loading",
    "load_pair": "specaudit.models._loading",
    "loaded_tokenizer": "specaudit.models._loading",
    "remember_tokenizer": "specaudit.models._loading",
    "load_tokenizer": "specaudit.models._loading",
    "resolve_device": "specaudit.models._device",
    "resolve_dtype": "specaudit.models._device",
    "save_tiny_pair": "specaudit.models._tiny",
    "target_as_draft": "specaudit.models._loading",
    "tiny_draft_of": "specaudit.models._tiny",
    "tiny_model": "specaudit.models._tiny",
    "tiny_tokenizer": "specaudit.models._tiny",
    "vocabulary_size": "specaudit.models._loading",
}

__all__ = ["DEFAULT_TARGET", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
