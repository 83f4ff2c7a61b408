"""The language of a prompt, from py3langid (a naive Bayes model of 97 languages that ships inside
its 4.6 MB wheel: nothing is downloaded at run time), with its confidence; "und" below a threshold.

lingua-language-detector was the first choice: its wheel is 96 MB and it holds its models in
memory per language, so it was left out; py3langid classifies a prompt in about 0.12 ms.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from specaudit.errors import InputError

UNDETERMINED = "und"  # BCP 47 / ISO 639-2 for "undetermined"
DEFAULT_MIN_CONFIDENCE = 0.5
# Characters classified: the start of a prompt says its language; a long one costs more, not better.
MAX_CHARS = 500


@lru_cache(maxsize=1)
def _identifier() -> Any:
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError:
        raise InputError("grouping by detected language needs py3langid; install it with pip install py3langid") from None
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def detect(texts: Sequence[str], *, min_confidence: float = DEFAULT_MIN_CONFIDENCE) -> tuple[list[str], list[float | None]]:
    """(language, confidence) per text: an ISO 639-1 code, or "und" for empty text or confidence below the threshold."""
    identifier = _identifier()
    languages: list[str] = []
    confidences: list[float | None] = []
    for text in texts:
        sample = text[:MAX_CHARS].strip() if text else ""
        if not sample:
            languages.append(UNDETERMINED)
            confidences.append(None)
            continue
        language, confidence = identifier.classify(sample)
        languages.append(language if confidence >= min_confidence else UNDETERMINED)
        confidences.append(float(confidence))
    return languages, confidences
