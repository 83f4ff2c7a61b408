"""The spellings of a tree's shape and a staged run's levels, torch-free so that the run config
can check them without importing the engines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specaudit.contracts.engines import engine_settings, step_shape
from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE
from specaudit.errors import InputError

CHILDREN = ("sampled", "top-k")
"""How a node's children are drawn from the draft (`--tree-children`)."""

# the shapes a run takes when its settings name none (the tree's and staged engines' sections)
DEFAULT_TREE = "3,2,1"
DEFAULT_CHILDREN = "sampled"
DEFAULT_LEVELS = "ngram,int8"
DEFAULT_LEVEL_K = "4,4"

MAX_TREE_NODES = 256  # a reference engine's tree: beyond this the one-pass mask is no longer small


def tree_size(branching: Sequence[int]) -> int:
    """Number of draft tokens in a full tree of this shape (the root, the context, not counted)."""
    total, width = 0, 1
    for b in branching:
        width *= b
        total += width
    return total


def parse_branching(text: str | Sequence[int]) -> tuple[int, ...]:
    """'3,2,1' (or a sequence of ints) as the branching per depth; one sentence when it is not one."""
    parts = [str(p).strip() for p in (text.split(",") if isinstance(text, str) else text)]
    if not parts or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise InputError(f"--tree {text!r}: write the children per depth as positive integers, e.g. 3,2,1")
    branching = tuple(int(p) for p in parts)
    if tree_size(branching) > MAX_TREE_NODES:
        raise InputError(f"--tree {text!r} has {tree_size(branching)} nodes; at most {MAX_TREE_NODES} are supported")
    return branching


def parse_children(text: str) -> str:
    if text not in CHILDREN:
        raise InputError(f"--tree-children {text!r}: choose {' or '.join(CHILDREN)}")
    return text


def parse_levels(levels: str | Sequence[str], level_k: str | Sequence[int]) -> tuple[tuple[str, int], tuple[str, int]]:
    """`--levels ngram,int8 --level-k 4,4` as ((small, k1), (medium, k2)): the two drafts from the
    smallest up, each with the tokens it proposes per round."""
    names = [s.strip() for s in (levels.split(",") if isinstance(levels, str) else levels)]
    ks = [str(k).strip() for k in (level_k.split(",") if isinstance(level_k, str) else level_k)]
    if len(names) != 2 or not all(names):
        raise InputError(f"--levels {levels!r}: name two drafts, the small one first, e.g. ngram,int8")
    if names[1] == "ngram":
        raise InputError(f"--levels {levels!r}: the medium level must be a model (its q is the target's proposal law), not ngram")
    if len(ks) != 2 or not all(k.isdigit() and int(k) >= 1 for k in ks):
        raise InputError(f"--level-k {level_k!r}: give two positive integers, the tokens per round of the small draft and of the medium")
    return (names[0], int(ks[0])), (names[1], int(ks[1]))


def describe_shape(engine: str, config: Mapping[str, Any]) -> str:
    """The shape of an engine's steps in words, from the run's config: a tree, a staged run's
    levels, or (any other engine) a chain of `--k` drafts."""
    shape = step_shape(engine)
    if shape == "branching":
        settings = engine_settings(config, engine)
        return f"tree {settings.get('branching', DEFAULT_TREE)}, {settings.get('children', DEFAULT_CHILDREN)} children"
    if shape == "levels":
        settings = engine_settings(config, engine)
        levels = str(settings.get("levels", DEFAULT_LEVELS)).split(",")
        ks = str(settings.get("level_k", DEFAULT_LEVEL_K)).split(",")
        return " -> ".join(f"{name}:{k}" for name, k in zip(levels, ks)) + " -> target"
    return f"chain, k = {config.get('k', 4)}"


def speculative_engines(config: Mapping[str, Any]) -> list[str]:
    """The engines of a run's config (a list, or a comma-separated string) other than the control and the screen."""
    engines = config.get("engines") or []
    names = engines.split(",") if isinstance(engines, str) else engines
    return [str(e).strip() for e in names if str(e).strip() not in (CONTROL_ENGINE, SCREEN_ENGINE)]


def describe_steps(config: Mapping[str, Any]) -> str:
    """What a run's speculative engines offer per step, each shape once ("chain, k = 4; tree 2,2,1, ...")."""
    engines = speculative_engines(config)
    shapes = ((f"{e} " if step_shape(e) == "levels" else "") + describe_shape(e, config) for e in engines)
    return "; ".join(dict.fromkeys(shapes)) or describe_shape("chain", config)
