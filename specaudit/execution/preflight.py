"""Checks of a run's inputs against each other, made before any decoding: a setting that cannot
apply to these prompts or this model is refused in one sentence, not discovered minutes later
(or never: a planted disparity on a group with no prompts plants nothing)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from specaudit.errors import InputError

if TYPE_CHECKING:
    import torch

    from specaudit.config import RunConfig
    from specaudit.models import NgramDraft
    from specaudit.prompts import PromptSet


def check_plant_targets(plant_disparity: str | None, prompt_set: PromptSet) -> None:
    """--plant-disparity dimension=group:factor must name a dimension and a group some prompt has."""
    if not plant_disparity:
        return
    from specaudit.models import DisparityPlant

    plant = DisparityPlant.parse(plant_disparity)
    dimension, group = plant.dimension, plant.group
    groups = {p.attributes[dimension] for p in prompt_set.prompts if dimension in p.attributes}
    if not groups:
        dimensions = sorted({d for p in prompt_set.prompts for d in p.attributes})
        raise InputError(
            f"--plant-disparity {plant_disparity!r}: no prompt has the dimension {dimension!r} "
            f"(the prompts have {', '.join(dimensions) or 'no dimensions'})"
        )
    if group not in groups:
        raise InputError(
            f"--plant-disparity {plant_disparity!r}: no prompt is in group {group!r} of {dimension!r} (its groups: {', '.join(sorted(groups))})"
        )


def context_length(model: torch.nn.Module) -> int | None:
    """The longest sequence a model's position encoding allows, when its config says."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def longest_prompt(encoded: Mapping[str, list[int]]) -> tuple[str, int]:
    """(id, length) of the longest encoded prompt; ties go to the first in the set's order."""
    prompt_id = max(encoded, key=lambda i: len(encoded[i]))
    return prompt_id, len(encoded[prompt_id])


def context_needed(prompt_length: int, max_new_tokens: int, k: int = 0) -> int:
    """Positions a generation can occupy: the prompt, every new token, and k drafted past the last."""
    return prompt_length + max_new_tokens + k


def check_fits(encoded: Mapping[str, list[int]], limit: int, where: str, max_new_tokens: int, k: int = 0) -> None:
    """Refuse, naming the longest prompt, when it plus the tokens to generate (plus k drafts) exceeds `limit`."""
    if not encoded:
        return
    prompt_id, length = longest_prompt(encoded)
    needed = context_needed(length, max_new_tokens, k)
    if needed > limit:
        over = sum(1 for ids in encoded.values() if context_needed(len(ids), max_new_tokens, k) > limit)
        drafts = f" and k {k}" if k else ""
        others = f" ({over - 1} other prompt(s) too)" if over > 1 else ""
        raise InputError(
            f"prompt {prompt_id!r} is {length} tokens; with --max-new-tokens {max_new_tokens}{drafts} it needs {needed} "
            f"positions and exceeds {where} of {limit} tokens{others}; shorten or drop it, or lower --max-new-tokens"
        )


def check_prompt_lengths(
    encoded: Mapping[str, list[int]],
    model: torch.nn.Module,
    max_new_tokens: int,
    *,
    draft: torch.nn.Module | NgramDraft | None = None,
    k: int = 0,
) -> None:
    """Every prompt plus the tokens to generate (plus the k a speculative step drafts) must fit in
    the target's context and, for a draft model with a context of its own, the draft's."""
    limit = context_length(model)
    if limit is not None:
        check_fits(encoded, limit, "the model's context", max_new_tokens, k)
    draft_limit = context_length(draft)
    if draft_limit is not None and draft_limit != limit:
        check_fits(encoded, draft_limit, "the draft's context", max_new_tokens, k)


def check_model_sources(cfg: RunConfig) -> None:
    """Named models among the target and draft are fetched now, on first use (models._named);
    hub ids: offline and uncached fails now, naming the model, before prompts are read or
    anything else is loaded (models._hub.hub_options); so does an endpoint audit's unset API key variable."""
    from specaudit.contracts.engines import LOCAL_ENGINES, backend_of
    from specaudit.contracts.engines import resolve as engine_module
    from specaudit.models._hub import DEFAULT_TARGET, _is_local, hub_options
    from specaudit.models._named import is_named, resolve

    backend = backend_of(cfg.engines)
    if backend is not None and backend.settings:  # the engine's own checks before anything loads (an endpoint's API key)
        check = getattr(engine_module(backend.settings), "preflight", None)
        if check is not None:
            check(cfg.engine_settings(backend.name))
    if backend is None or backend.fetches_named_models:  # the engines that read model files here
        for name in (cfg.target, cfg.draft):
            if is_named(name):
                resolve(name)
    if any(engine not in LOCAL_ENGINES for engine in cfg.engines):  # a backend: the server holds the models
        return
    derived = ("int8", "ngram", "early-exit")
    for name in (cfg.target, cfg.draft):
        if isinstance(name, str) and name != DEFAULT_TARGET and not name.startswith(derived) and not _is_local(name) and not is_named(name):
            hub_options(name)
