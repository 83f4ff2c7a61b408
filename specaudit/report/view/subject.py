"""What the report says was audited (models, hashes, hardware, the commit the run was made at)
and the rerun commands it suggests."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from specaudit.contracts.snapshot import (
    DeviceInfo,
    ModelInfo,
    ModelsBlock,
    PromptSetInfo,
    RunConfigBlock,
    SeedsBlock,
    VersionsBlock,
)
from specaudit.decoding._shapes import describe_steps
from specaudit.report.view.format import MISSING, finite, integer, recorded, setting

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import RunSection, Snapshot

DRAFT_KINDS = {
    "int8": "int8 weights of the target (per-channel scales, float activations; same architecture)",
    "ngram": "prompt lookup: proposes the tokens that followed the same n-gram earlier in the prompt (no model)",
    "suffix": "suffix decoding: proposes continuations found in suffix trees of the prompt and of earlier responses (no model)",
}


def describe_draft(draft: ModelInfo, config: RunConfigBlock, target_name: str) -> str:
    derived = str(draft.derived or "")
    source = draft.from_ or target_name
    if derived:
        if derived.startswith("early-exit"):
            layers = derived.partition(":")[2] or "N"
            return f"first {layers} layers of {source} with its output head (early exit)"
        if derived in DRAFT_KINDS:
            text = DRAFT_KINDS[derived].replace("the target", source)
            return f"{derived}: {text}"
        return f"{derived} derived from {source}"
    name = draft.name or config.draft or MISSING
    return f"separate model {name}"


def model_hash(model: ModelInfo) -> str:
    """Revision or content hash of a model entry (HF revision, GGUF sha256, weight hashes)."""
    if model.revision:
        return f"revision {model.revision}"
    if model.gguf_sha256:
        return f"GGUF sha256 {model.gguf_sha256}"
    if model.sha256:
        (file, digest), more = next(iter(model.sha256.items())), len(model.sha256) - 1
        return f"sha256 {file}: {digest}" + (f" (+{more} more)" if more else "")
    return "not recorded"


def hardware_text(run: RunSection) -> str:
    device = run.device or DeviceInfo()
    parts = []
    if str(device.type).lower() in ("cuda", "gpu"):
        parts.append(f"GPU {device.name or 'unnamed'}")
    else:
        parts.append(f"CPU {device.cpu_model}" if device.cpu_model else f"CPU ({device.name or 'model not recorded'})")
        if device.cores:
            parts.append(f"{device.cores} cores")
    if device.threads:
        parts.append(f"{device.threads} thread{'s' if device.threads != 1 else ''} used")
    dtype = (run.models or ModelsBlock()).dtype
    if dtype:
        parts.append(dtype)
    return ", ".join(parts)


def subject(snapshot: Snapshot) -> list[tuple[str, str]]:
    """The audit subject, model-card style: (label, text) rows."""
    run = snapshot.run
    models, config = run.models or ModelsBlock(), run.config or RunConfigBlock()
    target, draft = models.target or ModelInfo(), models.draft or ModelInfo()
    target_name = str(target.name or config.target or MISSING)
    shown_target = target_name + (" (the embedded SmolLM2-135M-Instruct, GGUF)" if target_name == "default" else "")
    if target.parameters:
        shown_target += f", {integer(target.parameters)} parameters"
    prompt_set, versions = run.prompt_set or PromptSetInfo(), run.versions or VersionsBlock()
    # the run's own commit only: the code rendering the report is not the code that decoded, and a
    # report rendered twice from one snapshot is the same file whatever the checkout
    commit_text = f"commit {versions.specaudit_commit}" if versions.specaudit_commit else "commit not recorded"
    temperature = config.temperature
    sampling = (
        "greedy"
        if temperature == 0
        else f"temperature {setting(temperature)}"
        + (f", top-k {config.top_k}" if config.top_k else "")
        + (f", top-p {setting(config.top_p)}" if finite(config.top_p) and config.top_p < 1 else "")
        if finite(temperature)
        else MISSING
    )
    served = models.speculative or ModelInfo()  # a live endpoint pair: the servers are the models audited
    vanilla = models.vanilla or ModelInfo()
    rows = [
        ("Target", f"{vanilla.model} at {vanilla.url}" if served.url else shown_target),
        ("Target revision", model_hash(target)),
        ("Draft", f"{served.model} at {served.url}" if served.url else describe_draft(draft, config, target_name)),
        (
            "Decoding",
            (
                f"per step: {describe_steps(config.as_written())}; {sampling}; up to "
                f"{recorded(config.max_new_tokens)} new tokens; {recorded(config.samples)} "
                f"sample(s) per prompt and engine"
            ),
        ),
        ("Hardware", hardware_text(run)),
        *([("Load", run.device.load)] if run.device is not None and run.device.load else []),
        ("Seed", str(recorded((run.seeds or SeedsBlock()).run, recorded(config.seed)))),
        (
            "Prompt set",
            (
                f"{prompt_set.written('name', MISSING)} version {prompt_set.written('version', MISSING)}, "
                f"{integer(prompt_set.n_prompts)} prompts, sha256 {prompt_set.written('checksum', MISSING)}"
            ),
        ),
        ("specaudit", f"{versions.written('specaudit', MISSING)}, {commit_text}"),
        ("Date", str(recorded(run.created))),
    ]
    return rows


def subject_ids(snapshot: Snapshot) -> tuple[str, str]:
    """Short target and draft identifiers for machine-read files (CSV columns, junit properties)."""
    models, config = snapshot.run.models or ModelsBlock(), snapshot.run.config or RunConfigBlock()
    target, draft = models.target or ModelInfo(), models.draft or ModelInfo()
    target_id = str(target.name or config.target or MISSING)
    revision = model_hash(target)
    if revision != "not recorded":
        target_id += f" ({revision})"
    draft_id = (
        f"{draft.derived} of {draft.from_ or target.name or config.target}" if draft.derived else str(draft.name or config.draft or MISSING)
    )
    return target_id, draft_id


# ============================================================================ commands
def with_flags(command: Any, flags: Mapping[str, Any]) -> str:
    """The run's own command with `flags` set (replacing a value it already had)."""
    text = str(command) if command and command != MISSING else "specaudit audit"
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    if not words or words[0] != "specaudit":
        words = ["specaudit", "audit"]
    for flag, value in flags.items():
        if flag in words:
            at = words.index(flag)
            if value is None:
                del words[at : at + 2]
            else:
                words[at + 1] = str(value)
        elif value is not None:
            words += [flag, str(value)]
    out = words.index("--out") if "--out" in words else -1
    if out >= 0 and out + 1 < len(words) and not words[out + 1].endswith("-rerun"):
        words[out + 1] = words[out + 1].rstrip("/") + "-rerun"  # a rerun never overwrites the audited run
    return shlex.join(words)
