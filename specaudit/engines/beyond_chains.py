"""The tree and staged engines' part of decoding one item: their shapes from the run config, and
the staged run's extra level models, derived from the loaded pair once and kept with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import torch

from specaudit.decoding._shapes import parse_branching, parse_children, parse_levels
from specaudit.errors import InputError

if TYPE_CHECKING:
    from specaudit.config import RunConfig
    from specaudit.decoding import Generation
    from specaudit.models import ModelPair, NgramDraft

# models derived for staged levels, per loaded target (an int8 copy of a 135M target is 0.5 GB:
# made once per process, not per item)
_DERIVED: WeakKeyDictionary = WeakKeyDictionary()


DRAFT_LEVEL = "draft"  # --levels ngram,draft: the run's --draft model as a level


def level_model(pair: ModelPair, name: str, cfg: RunConfig) -> torch.nn.Module | NgramDraft:
    """The draft a staged level names: the run's --draft itself, or one derived from the target."""
    from specaudit.models import NgramDraft, early_exit_draft, int8_draft, target_as_draft

    if name in (DRAFT_LEVEL, cfg.draft) and pair.draft is not None:
        return pair.draft
    if name == "ngram":
        return NgramDraft()
    derived = _DERIVED.setdefault(pair.target, {})
    if name not in derived:
        if name == "int8":
            derived[name] = int8_draft(pair.target)
        elif name == "target":
            derived[name] = target_as_draft(pair.target)
        elif name.startswith("early-exit:") and name.partition(":")[2].isdigit():
            derived[name] = early_exit_draft(pair.target, int(name.partition(":")[2]))
        else:
            raise InputError(
                f"--levels names {name!r}: a level is ngram, int8, early-exit:N, target, or draft (the run's --draft, {cfg.draft!r})"
            )
    return derived[name]


def engine_k(engine: str, cfg: RunConfig) -> int:
    """The tokens a step offers the target: the tree's depth, the medium's k, the chain's k."""
    if engine == "tree":
        return len(parse_branching(cfg.engine_settings("tree")["branching"]))
    if engine == "staged":
        staged = cfg.engine_settings("staged")
        return parse_levels(staged["levels"], staged["level_k"])[1][1]
    return cfg.k


def generate_tree(pair: ModelPair, prompt_ids: list[int], cfg: RunConfig, **common: Any) -> Generation:
    from specaudit.decoding.tree import tree_generate

    tree = cfg.engine_settings("tree")
    return tree_generate(
        pair.target,
        pair.draft,
        prompt_ids,
        branching=parse_branching(tree["branching"]),
        children=parse_children(tree["children"]),
        **common,
    )


def generate_staged(pair: ModelPair, prompt_ids: list[int], cfg: RunConfig, **common: Any) -> Generation:
    from specaudit.decoding.staged import staged_generate

    staged = cfg.engine_settings("staged")
    (small, k_small), (medium, k_medium) = parse_levels(staged["levels"], staged["level_k"])
    medium_model = level_model(pair, medium, cfg)
    if not isinstance(medium_model, torch.nn.Module):
        raise InputError(f"--levels {staged['levels']!r}: the medium level must be a model, not {medium!r}")
    return staged_generate(
        pair.target, level_model(pair, small, cfg), medium_model, prompt_ids, k_small=k_small, k_medium=k_medium, **common
    )
