"""The `staged` settings of a run (`--engines staged`): the run config's `extra.staged` section, which
the flags --levels and --level-k set; checked before anything loads (docs/trees.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from specaudit._validation import SETTINGS_CONFIG, settings_section
from specaudit.decoding._shapes import DEFAULT_LEVEL_K, DEFAULT_LEVELS, parse_levels

if TYPE_CHECKING:
    from specaudit.config import RunConfig


class StagedSettings(BaseModel):
    model_config = SETTINGS_CONFIG

    levels: str = DEFAULT_LEVELS  # the small draft, then the medium model (--levels)
    level_k: str = DEFAULT_LEVEL_K  # tokens per round of the small draft, and of the medium: the target's k (--level-k)


def validate_settings(section: dict | None, cfg: RunConfig) -> dict:
    """The section checked and completed with defaults, as the run config keeps it."""
    settings = settings_section(section or {}, StagedSettings, "extra.staged")
    parse_levels(settings.levels, settings.level_k)
    return settings.model_dump()


def settings_identity(section: dict) -> dict:
    """What decides the records, under the names run folders have always recorded."""
    return {"levels": section["levels"], "level_k": section["level_k"]}
