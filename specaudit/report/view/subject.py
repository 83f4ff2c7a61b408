"""What the report says was audited (models, hashes, hardware, the commit the run was made at)
and the rerun commands it suggests."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from specaudit.contracts.run import SPECULATIVE_ENGINE
from specaudit.contracts.snapshot import PromptSetInfo
from specaudit.decoding._shapes import describe_steps
from specaudit.report.view.format import MISSING, finite, integer, mapping, recorded, setting

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import RunSection, Snapshot

DRAFT_KINDS = {
    "int8": "int8 weights of the target (per-channel scales, float activations; same architecture)",
    "ngram": "prompt lookup: proposes the tokens that followed the same n-gram earlier in the prompt (no model)",
}


def describe_draft(draft: Mapping[str, Any], config: Mapping[str, Any], target_name: str) -> str:
    derived = str(draft.get("derived") or "")
    source = draft.get("from") or target_name
    if derived:
        if derived.startswith("early-exit"):
            layers = derived.partition(":")[2] or "N"
            return f"first {layers} layers of {source} with its output head (early exit)"
        if derived in DRAFT_KINDS:
            text = DRAFT_KINDS[derived].replace("the target", source)
            return f"{derived}: {text}"
        return f"{derived} derived from {source}"
    name = draft.get("name") or config.get("draft") or MISSING
    return f"separate model {name}"


def model_hash(model: Mapping[str, Any]) -> str:
    """Revision or content hash of a model entry (GGUF sha256, weight hashes, HF revision)."""
    for key in ("revision", "gguf_sha256", "sha256"):
        value = model.get(key)
        if isinstance(value, Mapping) and value:
            first = next(iter(value.items()))
            return f"{key} {first[0]}: {first[1]}" + (f" (+{len(value) - 1} more)" if len(value) > 1 else "")
        if value:
            return f"{key.replace('gguf_', 'GGUF ')} {value}"
    return "not recorded"


def hardware_text(run: RunSection) -> str:
    device = run.device or {}
    if not isinstance(device, Mapping):
        return str(device or MISSING)
    kind = str(device.get("type", "")).lower()
    parts = []
    if kind in ("cuda", "gpu"):
        parts.append(f"GPU {device.get('gpu') or device.get('name') or 'unnamed'}")
        if device.get("driver"):
            parts.append(f"driver {device['driver']}")
    else:
        model = device.get("cpu_model") or device.get("cpu")
        parts.append(f"CPU {model}" if model else f"CPU ({device.get('name') or 'model not recorded'})")
        cores = device.get("cores") or device.get("cpu_count")
        if cores:
            parts.append(f"{cores} cores")
    if device.get("threads"):
        parts.append(f"{device['threads']} thread{'s' if device['threads'] != 1 else ''} used")
    dtype = (run.models or {}).get("dtype")
    if dtype:
        parts.append(str(dtype))
    return ", ".join(parts)


def subject(snapshot: Snapshot) -> list[tuple[str, str]]:
    """The audit subject, model-card style: (label, text) rows."""
    run = snapshot.run
    models, config = run.models or {}, run.config or {}
    target, draft = mapping(models.get("target")), mapping(models.get("draft"))
    target_name = str(target.get("name") or config.get("target") or MISSING)
    shown_target = target_name + (" (the embedded SmolLM2-135M-Instruct, GGUF)" if target_name == "default" else "")
    if target.get("parameters"):
        shown_target += f", {integer(target['parameters'])} parameters"
    prompt_set, versions = run.prompt_set or PromptSetInfo(), run.versions or {}
    commit = versions.get("specaudit_commit") or getattr(run, "git_commit", None) or versions.get("git")  # git_commit: older runs
    # the run's own commit only: the code rendering the report is not the code that decoded, and a
    # report rendered twice from one snapshot is the same file whatever the checkout
    commit_text = f"commit {commit}" if commit else "commit not recorded"
    temperature = config.get("temperature")
    sampling = (
        "greedy"
        if temperature == 0
        else f"temperature {setting(temperature)}"
        + (f", top-k {config['top_k']}" if config.get("top_k") else "")
        + (f", top-p {setting(config['top_p'])}" if finite(config.get("top_p")) and config["top_p"] < 1 else "")
        if finite(temperature)
        else MISSING
    )
    endpoint = mapping(models.get(SPECULATIVE_ENGINE)).get("url")
    vanilla = mapping(models.get("vanilla"))
    rows = [
        ("Target", f"{vanilla.get('model')} at {vanilla.get('url')}" if endpoint else shown_target),
        ("Target revision", model_hash(target)),
        ("Draft", f"{models[SPECULATIVE_ENGINE].get('model')} at {endpoint}" if endpoint else describe_draft(draft, config, target_name)),
        (
            "Decoding",
            (
                f"per step: {describe_steps(config)}; {sampling}; up to "
                f"{recorded(config.get('max_new_tokens'))} new tokens; {recorded(config.get('samples'))} "
                f"sample(s) per prompt and engine"
            ),
        ),
        ("Hardware", hardware_text(run)),
        ("Seed", str(recorded((run.seeds or {}).get("run"), recorded(config.get("seed"))))),
        (
            "Prompt set",
            (
                f"{prompt_set.written('name', MISSING)} version {prompt_set.written('version', MISSING)}, "
                f"{integer(prompt_set.n_prompts)} prompts, sha256 {prompt_set.written('checksum', MISSING)}"
            ),
        ),
        ("specaudit", f"{versions.get('specaudit', MISSING)}, {commit_text}"),
        ("Date", str(recorded(run.created))),
    ]
    return rows


def subject_ids(snapshot: Snapshot) -> tuple[str, str]:
    """Short target and draft identifiers for machine-read files (CSV columns, junit properties)."""
    models, config = snapshot.run.models or {}, snapshot.run.config or {}
    target, draft = mapping(models.get("target")), mapping(models.get("draft"))
    target_id = str(target.get("name") or config.get("target") or MISSING)
    revision = model_hash(target)
    if revision != "not recorded":
        target_id += f" ({revision})"
    derived = draft.get("derived")
    draft_id = (
        f"{derived} of {draft.get('from') or target.get('name') or config.get('target')}"
        if derived
        else str(draft.get("name") or config.get("draft") or MISSING)
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
