"""The `tree` settings of a run (`--engines tree`): the run config's `extra.tree` section, which the
flags --tree and --tree-children set; checked before anything loads (docs/trees.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from specaudit._validation import SETTINGS_CONFIG, settings_section
from specaudit.decoding._shapes import DEFAULT_CHILDREN, DEFAULT_TREE, parse_branching, parse_children

if TYPE_CHECKING:
    from specaudit.config import RunConfig


class TreeSettings(BaseModel):
    model_config = SETTINGS_CONFIG

    branching: str = DEFAULT_TREE  # children per depth, e.g. 3,2,1 (--tree)
    children: str = DEFAULT_CHILDREN  # sampled (i.i.d. from q) or top-k (the draft's k most likely) (--tree-children)


def validate_settings(section: dict | None, cfg: RunConfig) -> dict:
    """The section checked and completed with defaults, as the run config keeps it."""
    settings = settings_section(section or {}, TreeSettings, "extra.tree")
    parse_branching(settings.branching)
    parse_children(settings.children)
    return settings.model_dump()


def settings_identity(section: dict) -> dict:
    """What decides the records, under the names run folders have always recorded."""
    return {"tree": section["branching"], "tree_children": section["children"]}
