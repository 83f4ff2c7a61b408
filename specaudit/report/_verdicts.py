"""What the report concludes: statuses read (or honestly derived) from the snapshot, the decision
banner, the Correctness / Fairness / Speed cards, the audit subject and the deduplicated "What to
do" list. Layout lives in the templates; this module only decides what is said.

Statuses come from specaudit.contracts. A snapshot written before the decisive statuses existed
carries old labels ("ok", "pass"); those are never shown as they are: a comparison's status is then
derived from its ratio's interval against the band (an interval that straddles a band edge is
INCONCLUSIVE, never "OK"), and a two-sample test that cannot reject by construction is "not run".
"""

from __future__ import annotations

import math
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specaudit.contracts import DEFAULT_BAND, CheckStatus, DisparityStatus, EquivalenceStatus
from specaudit.report._format import MISSING, finite, fixed, get, integer, setting, triple


def _mapping(value: Any) -> Mapping[str, Any]:
    """A snapshot part that should be a mapping, or an empty one (odd shapes never crash the report)."""
    return value if isinstance(value, Mapping) else {}


# ============================================================================ statuses
DECIDED = (DisparityStatus.FLAG, DisparityStatus.WITHIN)


def band_of(part: Mapping[str, Any]) -> tuple[float, float]:
    tolerance = get(part, "tolerance")
    if isinstance(tolerance, (list, tuple)) and len(tolerance) == 2 and all(map(finite, tolerance)) and 0 < tolerance[0] < tolerance[1]:
        return float(tolerance[0]), float(tolerance[1])
    return DEFAULT_BAND


def detectable_ratios(row: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """The smallest drop and rise of the ratio the comparison detects with 80% power: the
    comparison's `mdr` (a number, [low, high] or {low, high}) or the older
    min_detectable_ratio_low/high fields; None where unknown."""
    mdr = row.get("mdr")
    if isinstance(mdr, Mapping):
        low, high = mdr.get("low"), mdr.get("high")
    elif isinstance(mdr, (list, tuple)) and len(mdr) == 2:
        low, high = mdr
    elif finite(mdr):
        low, high = (mdr, None) if mdr < 1 else (None, mdr)
    else:
        low, high = row.get("min_detectable_ratio_low"), row.get("min_detectable_ratio_high")
    return (low if finite(low) else None), (high if finite(high) else None)


def comparison_status(row: Mapping[str, Any], band: tuple[float, float]) -> DisparityStatus:
    """A group comparison's DisparityStatus: the one it carries, else derived from its ratio's
    interval against the band; a design whose detectable ratio lies beyond the band cannot decide."""
    carried = row.get("status")
    if isinstance(carried, str) and carried in DisparityStatus.__members__:  # the new vocabulary is upper case
        return DisparityStatus(carried)
    ratio = row.get("ratio") if isinstance(row.get("ratio"), Mapping) else {}
    low, high = ratio.get("ci_low"), ratio.get("ci_high")
    mdr_low, mdr_high = detectable_ratios(row)
    decidable = (
        finite(low) and finite(high) and not ((mdr_low is not None and mdr_low < band[0]) or (mdr_high is not None and mdr_high > band[1]))
    )
    return DisparityStatus.from_interval(low if finite(low) else math.nan, high if finite(high) else math.nan, band, decidable=decidable)


def engine_status(entry: Mapping[str, Any]) -> EquivalenceStatus:
    """An engine's EquivalenceStatus: carried, else derived (a rejection or an impossible token is
    a violation; a bound below δ is equivalence; otherwise only "no violation found")."""
    carried = entry.get("status")
    if isinstance(carried, str):
        try:
            return EquivalenceStatus.parse(carried)
        except ValueError:
            pass
    gof, two = get(entry, "goodness_of_fit", default={}), get(entry, "two_sample", default={})
    greedy = get(entry, "greedy", default={})
    if not (gof or two or greedy):
        return EquivalenceStatus.NOT_RUN
    impossible = get(gof, "impossible_tokens", "statistic", default=0)
    if entry.get("verdict") == "fail" or (finite(impossible) and impossible > 0):
        return EquivalenceStatus.VIOLATION
    if get(entry, "tv_bound", "verdict") == "equivalent within delta":
        return EquivalenceStatus.EQUIVALENT
    return EquivalenceStatus.NO_VIOLATION_FOUND


def not_run_reason(test: Mapping[str, Any], *, two_sample: bool, samples: Any) -> str | None:
    """Why a test could not reject: the reason it carries, else (two-sample tests permuted within
    prompts) one sample per prompt and engine, which makes every permutation give the same statistic."""
    reason = test.get("not_run_reason")
    if reason:
        return str(reason)
    if two_sample and finite(samples) and samples < 2:
        return (
            "one sample per prompt and engine: permuting engine labels within a prompt cannot change the statistic, "
            "so p = 1 by construction (rerun with --samples 2 or more)"
        )
    return None


STATUS_TEXT = {
    DisparityStatus.FLAG: "interval wholly outside the band",
    DisparityStatus.WITHIN: "interval wholly inside the band: parity shown",
    DisparityStatus.INCONCLUSIVE: "interval crosses a band edge: cannot tell",
    DisparityStatus.INSUFFICIENT: "too few prompts for this design to decide",
}
STATUS_CSS = {
    DisparityStatus.FLAG: "fail",
    DisparityStatus.WITHIN: "pass",
    DisparityStatus.INCONCLUSIVE: "warn",
    DisparityStatus.INSUFFICIENT: "none",
}
STATUS_SYMBOL = {
    DisparityStatus.FLAG: "■",
    DisparityStatus.WITHIN: "●",
    DisparityStatus.INCONCLUSIVE: "◆",
    DisparityStatus.INSUFFICIENT: "△",
}
EQUIVALENCE_CSS = {
    EquivalenceStatus.VIOLATION: "fail",
    EquivalenceStatus.EQUIVALENT: "pass",
    EquivalenceStatus.NO_VIOLATION_FOUND: "warn",
    EquivalenceStatus.NOT_RUN: "none",
}


def status_badge(status: DisparityStatus | EquivalenceStatus | str) -> dict[str, str]:
    if isinstance(status, DisparityStatus):
        return {"text": status.value, "css": STATUS_CSS[status], "symbol": STATUS_SYMBOL[status], "key": status.value.lower()}
    if isinstance(status, EquivalenceStatus):
        symbol = {"fail": "✗", "pass": "✓", "warn": "?", "none": "–"}[EQUIVALENCE_CSS[status]]
        return {"text": status.value.upper(), "css": EQUIVALENCE_CSS[status], "symbol": symbol, "key": status.name.lower()}
    return {"text": str(status).upper(), "css": "none", "symbol": "–", "key": str(status).lower()}


# ============================================================================ comparisons
def comparisons(snapshot: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every (dimension, metric, group) comparison with the reference, its status and figures."""
    out = []
    for dimension, part in _mapping(get(snapshot, "disparities")).items():
        if not isinstance(part, Mapping):
            continue
        band = band_of(part)
        for metric, block in _mapping(get(part, "metrics")).items():
            for group, row in _mapping(get(block, "pairwise")).items():
                if not isinstance(row, Mapping):
                    continue
                status = comparison_status(row, band)
                low, high = detectable_ratios(row)
                out.append(
                    {
                        "dimension": str(dimension),
                        "metric": str(metric),
                        "group": str(group),
                        "status": status,
                        "band": band,
                        "reference": get(part, "reference", default="overall"),
                        "row": row,
                        "n_prompts": row.get("n_prompts"),
                        "mdr_low": low,
                        "mdr_high": high,
                    }
                )
    return out


def prompts_to_decide(items: list[dict[str, Any]]) -> tuple[int, int] | None:
    """Prompts per group at which the comparisons could detect a ratio at the band's edges, from
    each comparison's own detectable ratio scaled by 1/√(prompts) (the normal approximation the
    detectable ratios come from): (median, largest) over the comparisons; None when none carries one."""
    needed = []
    for item in items:
        n = item.get("n_prompts")
        if not (finite(n) and n > 0):
            continue
        band = item["band"]
        for mdr, edge in ((item["mdr_low"], band[0]), (item["mdr_high"], band[1])):
            if mdr is not None and abs(mdr - 1) > abs(edge - 1) > 0:
                needed.append(math.ceil(n * ((mdr - 1) / (edge - 1)) ** 2))
    if not needed:
        return None
    needed.sort()
    return needed[len(needed) // 2], needed[-1]


# ============================================================================ speed
def speed_summary(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """Overall speed-up (the dimension covering the most prompts), groups slower than vanilla, and
    the conditions the timings were taken under."""
    groups = _mapping(get(snapshot, "groups"))
    overall, overall_dim, overall_n = None, None, -1
    slower, slower_sig, total, by_dim = [], [], 0, []
    for dimension, part in groups.items():
        block = get(part, "overall", "metrics", "speedup")
        n = get(part, "overall", "n_prompts", default=0)
        if isinstance(block, Mapping) and finite(block.get("value")) and finite(n) and n > overall_n:
            overall, overall_dim, overall_n = block, dimension, n
        for group, entry in _mapping(get(part, "by_group")).items():
            sp = get(entry, "metrics", "speedup")
            if not isinstance(sp, Mapping) or not finite(sp.get("value")):
                continue
            total += 1
            if sp["value"] < 1:
                slower.append(f"{dimension}={group}")
                if finite(sp.get("ci_high")) and sp["ci_high"] < 1:
                    slower_sig.append(f"{dimension}={group}")
            by_dim.append((sp["value"], f"{dimension}={group}"))
    run = get(snapshot, "run", default={})
    config = get(run, "config", default={})
    device = get(run, "device", default={})
    threads = get(device, "threads", default=get(config, "threads"))
    repeats = get(config, "timing_repeats")
    conditions = [
        f"{threads} CPU thread{'s' if threads != 1 else ''}" if finite(threads) else "threads not recorded",
        (
            f"{repeats} extra timing run{'s' if repeats != 1 else ''} per prompt"
            if finite(repeats) and repeats > 0
            else "one timed run per prompt (no repeats)"
            if finite(repeats)
            else "timing repeats not recorded"
        ),
        f"warm-up {get(config, 'warmup')}" if finite(get(config, "warmup")) else None,
        f"device {hardware_text(run)}",
        "vanilla and speculative timed back to back per prompt",
    ]
    if get(device, "shared") is True:
        conditions.append("shared machine (other processes ran)")
    values = sorted(by_dim)
    return {
        "ran": overall is not None,
        "overall": triple(overall, fixed, "×") if overall else MISSING,
        "overall_block": overall or {},
        "overall_scope": f"{integer(overall_n)} prompts of the {overall_dim} dimension" if overall else "",
        "below_one": bool(overall) and finite(overall.get("ci_high")) and overall["ci_high"] < 1,
        "above_one": bool(overall) and finite(overall.get("ci_low")) and overall["ci_low"] > 1,
        "n_groups": total,
        "slower": slower,
        "slower_sig": slower_sig,
        "range": f"{fixed(values[0][0])}× ({values[0][1]}) to {fixed(values[-1][0])}× ({values[-1][1]})" if values else MISSING,
        "conditions": [c for c in conditions if c],
    }


# ============================================================================ audit subject
DRAFT_KINDS = {
    "int8": "dynamic int8 quantisation of the target (per-channel weights, same architecture)",
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
    name = draft.get("name") or get(config, "draft", default=MISSING)
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


def hardware_text(run: Mapping[str, Any]) -> str:
    device = get(run, "device", default={})
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
    dtype = get(run, "models", "dtype")
    if dtype:
        parts.append(str(dtype))
    return ", ".join(parts)


def _report_time_commit() -> str | None:
    """`git describe` of the specaudit source rendering the report, when it is a git checkout."""
    package = Path(__file__).resolve().parents[1]
    if not (package.parent / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(package.parent), "describe", "--always", "--dirty", "--tags"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def subject(snapshot: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The audit subject, model-card style: (label, text) rows."""
    run = get(snapshot, "run", default={})
    models = _mapping(get(run, "models"))
    config = _mapping(get(run, "config"))
    target = _mapping(get(models, "target"))
    draft = _mapping(get(models, "draft"))
    target_name = str(target.get("name") or get(config, "target", default=MISSING))
    shown_target = target_name + (" (the embedded SmolLM2-135M-Instruct, GGUF)" if target_name == "default" else "")
    if target.get("parameters"):
        shown_target += f", {integer(target['parameters'])} parameters"
    prompt_set = _mapping(get(run, "prompt_set"))
    versions = _mapping(get(run, "versions"))
    commit = versions.get("specaudit_commit") or get(run, "git_commit") or versions.get("git")
    commit_text = f"commit {commit}" if commit else None
    if not commit_text:
        at_report = _report_time_commit()
        commit_text = f"commit not recorded by the run; report rendered at {at_report}" if at_report else "commit not recorded"
    temperature = get(config, "temperature")
    sampling = (
        "greedy"
        if temperature == 0
        else f"temperature {setting(temperature)}"
        + (f", top-k {config['top_k']}" if get(config, "top_k") else "")
        + (f", top-p {setting(config['top_p'])}" if finite(get(config, "top_p")) and config["top_p"] < 1 else "")
        if finite(temperature)
        else MISSING
    )
    endpoint = get(models, "speculative", "url")
    rows = [
        ("Target", f"{get(models, 'vanilla', 'model')} at {get(models, 'vanilla', 'url')}" if endpoint else shown_target),
        ("Target revision", model_hash(target)),
        ("Draft", f"{get(models, 'speculative', 'model')} at {endpoint}" if endpoint else describe_draft(draft, config, target_name)),
        (
            "Decoding",
            (
                f"k = {get(config, 'k', default=MISSING)} draft tokens per step; {sampling}; up to "
                f"{get(config, 'max_new_tokens', default=MISSING)} new tokens; {get(config, 'samples', default=MISSING)} "
                f"sample(s) per prompt and engine"
            ),
        ),
        ("Hardware", hardware_text(run)),
        ("Seed", str(get(run, "seeds", "run", default=get(config, "seed", default=MISSING)))),
        (
            "Prompt set",
            (
                f"{prompt_set.get('name', MISSING)} version {prompt_set.get('version', MISSING)}, "
                f"{integer(prompt_set.get('n_prompts'))} prompts, sha256 {prompt_set.get('checksum', MISSING)}"
            ),
        ),
        ("specaudit", f"{versions.get('specaudit', MISSING)}, {commit_text}"),
        ("Date", str(get(run, "created", default=MISSING))),
    ]
    return rows


def subject_ids(snapshot: Mapping[str, Any]) -> tuple[str, str]:
    """Short target and draft identifiers for machine-read files (CSV columns, junit properties)."""
    run = _mapping(get(snapshot, "run"))
    models, config = _mapping(get(run, "models")), _mapping(get(run, "config"))
    target = _mapping(models.get("target"))
    draft = _mapping(models.get("draft"))
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


# ============================================================================ decision
DECISIONS = {
    "enable": ("Enable", "pass"),
    "conditions": ("Enable with conditions", "warn"),
    "do_not": ("Do not enable", "fail"),
    "insufficient": ("Insufficient evidence", "none"),
}


def decide(
    snapshot: Mapping[str, Any], engines: list[tuple[str, EquivalenceStatus]], comps: list[dict[str, Any]], speed: dict[str, Any]
) -> dict[str, Any]:
    """The banner: derived from the gate, with the evidence that decides it.

    Order: no gate → insufficient; a failing gate check or an equivalence violation → do not
    enable; equivalence not tested → insufficient; speculation slower than vanilla overall (the
    gate's min-speed-up checks) → do not enable; no disparity comparison decidable → insufficient;
    warnings → enable with conditions; else enable."""
    gate = get(snapshot, "gate", default={})
    checks = [c for c in (get(gate, "checks", default=[]) or []) if isinstance(c, Mapping)]
    judged = isinstance(gate, Mapping) and isinstance(gate.get("checks"), list) and gate.get("status")
    gate_status = CheckStatus.parse(gate["status"]) if judged else None
    reasons: list[str] = []
    violations = [name for name, status in engines if status == EquivalenceStatus.VIOLATION]
    failing = [c for c in checks if str(c.get("status")).lower() == "fail"]
    decided = [c for c in comps if c["status"] in DECIDED]
    flagged = [c for c in comps if c["status"] == DisparityStatus.FLAG]
    if gate_status is None:
        key = "insufficient"
        reasons.append("No deployment gate has judged this snapshot.")
    elif failing or violations:
        key = "do_not"
        reasons += [f"{name}: its output is not distributed as the target's." for name in violations]
        reasons += [
            f"Gate check {c.get('name')} fails: {c.get('message', '')}"
            for c in failing
            if not any(str(c.get("name", "")).endswith(f"[{v}]") for v in violations)
        ]
    elif not engines or all(status == EquivalenceStatus.NOT_RUN for _, status in engines):
        key = "insufficient"
        reasons.append("Equivalence with the target was not tested.")
    elif speed.get("below_one"):
        key = "do_not"
        reasons.append(
            f"Speculation is slower than vanilla: overall speed-up {speed['overall']} ({speed['overall_scope']}); "
            f"{len(speed['slower'])} of {speed['n_groups']} groups below 1×."
        )
    elif comps and not decided:
        key = "insufficient"
    else:
        key = "conditions" if gate_status != CheckStatus.PASS else "enable"
    # what else the reader must know, whatever the decision
    if engines and key != "insufficient" and not violations:
        no_proof = [name for name, status in engines if status == EquivalenceStatus.NO_VIOLATION_FOUND]
        if no_proof:
            reasons.append(f"Correctness: no test found a violation for {', '.join(no_proof)}, but equivalence within δ is not shown.")
    if comps:
        undecided = len(comps) - len(decided)
        if flagged:
            reasons.append(
                f"Fairness: {len(flagged)} group comparison(s) outside the band: "
                + ", ".join(sorted({f"{c['dimension']}={c['group']}" for c in flagged}))
                + "."
            )
        if undecided:
            reasons.append(
                f"Fairness: {undecided} of {len(comps)} group comparisons cannot be decided with these prompts "
                "(INCONCLUSIVE or INSUFFICIENT)."
            )
    elif key != "insufficient" and gate_status is not None:
        reasons.append("Fairness: no group comparisons in this snapshot.")
    if speed.get("ran") and not speed.get("below_one") and speed.get("slower"):
        reasons.append(f"Speed: {len(speed['slower'])} of {speed['n_groups']} groups run slower than vanilla.")
    if key == "conditions":
        families: dict[str, int] = {}
        for check in checks:
            if str(check.get("status")).lower() == "warn":
                family = str(check.get("name", "")).split("[", 1)[0]
                families[family] = families.get(family, 0) + 1
        reasons.insert(0, "Conditions (the gate's warnings): " + ", ".join(f"{family} ({n})" for family, n in families.items()) + ".")
    title, css = DECISIONS[key]
    exit_code = get(gate, "exit_code")
    return {
        "key": key,
        "title": title,
        "css": css,
        "reasons": reasons,
        "gate": f"Gate: {gate_status.value} (exit {exit_code if finite(exit_code) else int(gate_status == CheckStatus.FAIL)})"
        if gate_status
        else "Gate: not run",
    }


# ============================================================================ what to do
def actions(
    snapshot: Mapping[str, Any],
    engines: list[tuple[str, EquivalenceStatus]],
    comps: list[dict[str, Any]],
    speed: dict[str, Any],
    equivalence_view: Mapping[str, Any],
) -> list[dict[str, str]]:
    """One item per problem (never one per dimension), MUST before SHOULD, each with a command."""
    run = get(snapshot, "run", default={})
    command = get(run, "command")
    config = _mapping(get(run, "config"))
    run_dir = get(run, "dir", default="RUN_DIR")
    items: list[dict[str, str]] = []

    def add(level: str, text: str, anchor: str, cmd: str | None = None) -> None:
        items.append({"level": level, "text": text, "anchor": anchor, "command": cmd or ""})

    if equivalence_view.get("ran") and equivalence_view.get("status") == "error":
        add(
            "fail",
            "Fix the audit before reading it: plain decoding fails its own goodness-of-fit, so scoring (model, dtype, "
            "warping) does not match the decoder.",
            "equivalence",
            with_flags(command, {}),
        )
    for name, status in engines:
        if status == EquivalenceStatus.VIOLATION:
            add(
                "fail",
                f"Do not ship {name}: its output does not follow the target distribution. Check the acceptance rule, the "
                "residual distribution and that temperature/top-k/top-p reach both draft and target.",
                "equivalence",
                "specaudit selftest --quick",
            )
    gate_checks = [c for c in (get(snapshot, "gate", "checks", default=[]) or []) if isinstance(c, Mapping)]
    for check in gate_checks:
        name = str(check.get("name", ""))
        if str(check.get("status")).lower() == "fail" and not name.startswith(("equivalence[", "disparity[")):
            add("fail", f"Gate check {name} fails: {check.get('message', '')}", "gate")
    flagged = sorted({f"{c['dimension']}={c['group']}" for c in comps if c["status"] == DisparityStatus.FLAG})
    if flagged:
        add(
            "fail",
            f"{len(flagged)} group(s) get a ratio to their reference outside the band: {', '.join(flagged)}. Route them to "
            "vanilla decoding or train the draft on them; the fallback simulation shows the effect of routing.",
            "disparity",
        )
    if speed.get("slower"):
        best_k = _common_best_k(snapshot)
        level = "fail" if speed.get("below_one") else "warn"
        text = (
            f"Speculation is slower than vanilla for {len(speed['slower'])} of {speed['n_groups']} groups "
            f"({len(speed['slower_sig'])} with the whole interval below 1×; range {speed['range']}). "
            + ("Do not enable it with this draft on this hardware; " if level == "fail" else "Route those groups to vanilla; ")
            + (
                f"the cost model's best draft length is k = {best_k}, so re-audit with it, or use a cheaper or better-matched draft."
                if best_k and best_k != get(config, "k")
                else "use a cheaper or better-matched draft."
            )
        )
        add(level, text, "speed", with_flags(command, {"--k": best_k}) if best_k and best_k != get(config, "k") else None)
    undecided = [c for c in comps if c["status"] not in DECIDED]
    if undecided:
        planned = prompts_to_decide(undecided)
        need = planned[0] if planned else None
        minimum = get(snapshot, "gate", "thresholds", "min_group_size")
        per_group = max([n for n in (need, int(minimum) if finite(minimum) else None) if n] or [0]) or None
        groups = sorted({f"{c['dimension']}={c['group']}" for c in undecided})
        text = (
            f"{len(undecided)} of {len(comps)} group comparisons ({len(groups)} groups) cannot be decided: their intervals "
            "cross a band edge or the design cannot detect a ratio at the band's edges."
        )
        if need:
            text += (
                f" About {need} prompts per group would make a ratio of {comps[0]['band'][0]:g} detectable for half of them, "
                f"{planned[1]} for all (each comparison's detectable ratio scaled by 1/√prompts)"
                + (f"; the gate asks for {int(minimum)}" if finite(minimum) and minimum > need else "")
                + "."
            )
        add("warn", text, "disparity", with_flags(command, {"--per-group": per_group}) if per_group else None)
    if equivalence_view.get("ran"):
        audited = [e for e in equivalence_view.get("engines", []) if not e.get("is_control")]
        not_shown = [e for e in audited if e.get("tv", {}).get("verdict") == "not shown"]
        not_run = [e for e in audited if any(r.get("not_run") for r in e.get("two_sample", {}).get("rows", []) or [])]
        if not_shown or not_run:
            samples = get(config, "samples", default=1)
            wanted = _samples_for_delta(not_shown[0]) if not_shown else None
            wanted = max(wanted or 0, 2 if not_run else 0, (samples or 1) + 1)
            parts = []
            if not_shown:
                parts.append(
                    f"equivalence within δ = {not_shown[0]['tv']['delta']} is not shown (TV upper bound {not_shown[0]['tv']['upper']})"
                )
            if not_run:
                parts.append("the two-sample tests cannot reject with one sample per prompt")
            add(
                "warn",
                "Correctness is not proven: " + " and ".join(parts) + f". Sample more outputs per prompt "
                f"(about {wanted} would make a first-token distance of δ detectable).",
                "equivalence",
                with_flags(command, {"--samples": wanted}),
            )
        if equivalence_view.get("warning"):
            add(
                "warn",
                f"Rerun with another seed: {str(equivalence_view['warning']).split(': a correct')[0]}.",
                "equivalence",
                with_flags(command, {"--seed": (get(config, "seed", default=0) or 0) + 1}),
            )
    else:
        add(
            "warn",
            "Equivalence was not tested: run the analysis with equivalence on before relying on this report.",
            "equivalence",
            f"specaudit analyze {run_dir}",
        )
    if not gate_checks:
        add("warn", "No deployment gate has judged this snapshot.", "gate", f"specaudit gate {run_dir} --write")
    if not items:
        add("pass", "Nothing to fix: no violation found, and every group comparison is within the band.", "summary")
    order = {"fail": 0, "warn": 1, "pass": 2}
    return sorted(items, key=lambda a: order[a["level"]])  # stable: within a level, the order above is the impact order


def _common_best_k(snapshot: Mapping[str, Any]) -> int | None:
    counts: dict[int, int] = {}
    for part in _mapping(get(snapshot, "recommendations")).values():
        for row in _mapping(get(part, "by_group")).values():
            k = get(row, "best_k")
            if isinstance(k, int):
                counts[k] = counts.get(k, 0) + 1
    return max(counts, key=lambda k: (counts[k], -k)) if counts else None


def _samples_for_delta(engine: Mapping[str, Any]) -> int | None:
    """Samples per prompt at which the first-token test detects a TV of δ: this run's detectable
    TV scaled by 1/√samples (the power planner's law for that test)."""
    power = {p["label"]: p.get("raw") for p in engine.get("power", [])}
    mde, delta = power.get("first-token TV"), engine.get("tv", {}).get("delta_value")
    samples = engine.get("samples")
    if not (finite(mde) and finite(delta) and delta > 0 and finite(samples)):
        return None
    return max(2, math.ceil(samples * (mde / delta) ** 2))


# ============================================================================ glossary
GLOSSARY = {
    "acceptance": ("acceptance rate", "the share of drafted tokens the target accepts"),
    "speedup": (
        "speed-up",
        ("vanilla time per token divided by speculative time per token, paired per prompt; below 1× speculation is slower"),
    ),
    "reference": ("reference group", "the group every other group of a dimension is compared with"),
    "ratio": ("ratio to reference", "a group's value divided by the reference group's value"),
    "band": ("tolerance band", "the range of ratios that counts as parity (by default 0.8–1.25, the four-fifths convention)"),
    "ci": ("95% interval", "a bootstrap confidence interval that resamples whole prompts"),
    "statuses": (
        "FLAG / WITHIN / INCONCLUSIVE / INSUFFICIENT",
        (
            "the ratio's interval lies wholly outside the band / wholly "
            "inside it / across a band edge; or the design cannot detect a ratio at the band's edges"
        ),
    ),
    "mdr": ("detectable ratio", "the smallest drop or rise of the ratio the test finds with 80% power at these group sizes"),
    "pit": (
        "PIT",
        (
            "probability integral transform: where each emitted token falls in the target's cumulative distribution; "
            "uniform when the sampler follows the target"
        ),
    ),
    "tv": (
        "TV",
        (
            "total-variation distance: the largest difference in probability two distributions give any set of outputs "
            "(0 identical, 1 disjoint)"
        ),
    ),
    "kl": ("KL", "Kullback–Leibler divergence, another distance between distributions"),
    "delta": ("δ", "the equivalence margin: TV below δ counts as equivalent"),
    "alpha": ("α", "the significance level, the accepted rate of false alarms"),
    "holm": ("Holm", "a correction of p-values for running several tests at once (family-wise error at α)"),
    "beta": ("β", "the theoretical acceptance probability, Σ min(p, q) over the vocabulary of target p and draft q"),
    "tau": ("τ", "tokens emitted per verification step"),
    "k": ("k", "draft tokens proposed per verification step"),
    "c": ("c", "the cost of one draft step relative to one target step"),
    "rank_biserial": ("rank-biserial", "an effect size from −1 to 1: how often one group's prompts beat the other's"),
    "control": ("control", "plain (vanilla) decoding, run through the same tests: if it fails them, the audit itself is suspect"),
    "two_sample": (
        "two-sample test",
        ("compares speculative with vanilla outputs only (black-box), permuting engine labels within each prompt"),
    ),
}


class Terms:
    """A term's short explanation in brackets at its first use in the page (so it also prints),
    a link to the glossary afterwards. Called from the template in reading order."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, key: str, shown: str | None = None):
        from markupsafe import Markup, escape

        name, meaning = GLOSSARY[key]
        text = escape(shown or name)
        if key in self.used:
            return Markup(f'<a class="term" href="#g-{key}">{text}</a>')
        self.used.add(key)
        return Markup(f'<dfn>{text}</dfn> <span class="gloss">({escape(meaning)})</span>')


def glossary_rows() -> list[tuple[str, str, str]]:
    return [(key, name, meaning) for key, (name, meaning) in sorted(GLOSSARY.items(), key=lambda kv: kv[1][0].lower())]


__all__ = [
    "GLOSSARY",
    "Terms",
    "actions",
    "band_of",
    "comparison_status",
    "comparisons",
    "decide",
    "describe_draft",
    "detectable_ratios",
    "engine_status",
    "glossary_rows",
    "hardware_text",
    "model_hash",
    "not_run_reason",
    "prompts_to_decide",
    "speed_summary",
    "status_badge",
    "subject",
    "subject_ids",
    "with_flags",
]
