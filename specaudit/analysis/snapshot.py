"""analyze: a run folder (records.jsonl + manifest.json) -> snapshot.json, validated against the
snapshot contract before it is written."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from specaudit._files import check_output_paths, json_clean, write_json_atomic
from specaudit.analysis.equivalence import equivalence_section, server_scored
from specaudit.config import AnalysisSettings
from specaudit.contracts.engines import ENGINES, resolve
from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE, SPECULATIVE_ENGINE
from specaudit.contracts.snapshot import SNAPSHOT_FILE, SNAPSHOT_SCHEMA_VERSION, load_snapshot
from specaudit.contracts.status import CheckStatus, EquivalenceStatus
from specaudit.errors import InputError
from specaudit.execution.records import RECORDS_FILE, read_manifest, read_records

if TYPE_CHECKING:
    from specaudit.models import ModelPair


def _dimensions(records: list[dict], manifest: dict, requested: list[str] | None) -> list[str]:
    """The prompt attributes to analyse. `context` (the prompt-length band, stats.context) is
    derived for every run: analysed when asked for, and by default when the prompts span two
    bands or more."""
    from specaudit.stats.context import CONTEXT_DIMENSION, has_own_context_attribute, spans_bands

    present = sorted({name for r in records for name in r.get("attributes", {})})
    derived = [] if has_own_context_attribute(records) else [CONTEXT_DIMENSION]
    if requested:
        missing = [d for d in requested if d not in present and d not in derived]
        if missing:
            raise InputError(
                f"--dimensions {', '.join(missing)}: the run's prompts have no such attribute (they have "
                f"{', '.join(present) or 'none'}, and the derived {CONTEXT_DIMENSION})"
            )
        return list(requested)
    declared = list((manifest.get("prompt_set") or {}).get("dimensions") or {})
    chosen = [d for d in declared if d in present] or present
    return chosen + [d for d in derived if spans_bands(records)]


def _context_part(frame, records: list[dict], engine: str, recommendations: dict, **options) -> dict:
    """snapshot.context (stats.context): acceptance by prompt length and output position, and the
    prompt-length fallback, whose sentence also joins the context dimension's advice."""
    from specaudit.stats.context import CONTEXT_DIMENSION, context_section
    from specaudit.stats.disparity.per_prompt import per_prompt_metrics

    paired = CONTROL_ENGINE in set(frame["engine"]) or engine == SCREEN_ENGINE
    per_prompt = per_prompt_metrics(frame, engine=engine, baseline=CONTROL_ENGINE) if paired else None
    part = context_section(records, engine, per_prompt=per_prompt, **options)
    advice = recommendations.get(CONTEXT_DIMENSION)
    if isinstance(advice, dict) and part["length_fallback"]:
        advice.setdefault("messages", []).append(part["findings"][-1])
    return part


def judge_by_level(snapshot: dict, records: list[dict], pair, *, alpha, delta, dims, seed, n_boot, equivalence: bool) -> None:
    """The concurrency section (analysis.concurrency); a level where equivalence fails fails the run's
    equivalence, naming the level, even where the pooled battery passed."""
    from specaudit.analysis.concurrency import concurrency_section

    section = concurrency_section(
        records, pair, alpha=alpha, delta=delta, dimensions=dims, seed=seed, n_boot=n_boot, equivalence=equivalence
    )
    snapshot["concurrency"] = section
    if section and section["failed_levels"]:
        judged = snapshot["equivalence"]
        judged["status"] = CheckStatus.FAIL
        judged["failed_concurrency_levels"] = section["failed_levels"]
        judged["message"] = f"{judged['message']}; {section['message']}" if judged.get("control_failed") else section["message"]
        for level in section["failed_levels"]:
            battery = (section["equivalence"].get(str(level)) or {}).get("engines", {})
            independence = section["independence"].get(str(level)) or {}
            for name, entry in judged.get("engines", {}).items():
                if entry.get("verdict") == CheckStatus.FAIL:
                    continue  # failed already (pooled, or at a lower level)
                if (battery.get(name) or {}).get("verdict") == CheckStatus.FAIL:
                    entry.update(verdict=CheckStatus.FAIL, status=battery[name]["status"], status_reason=section["message"])
                elif (independence.get(name) or {}).get("verdict") == CheckStatus.FAIL:
                    entry.update(verdict=CheckStatus.FAIL, status=EquivalenceStatus.VIOLATION, status_reason=section["message"])


def _parity(records: list[dict]) -> dict | None:
    """The logprob parity section (analysis.logprob_parity) where a server returned logprobs."""
    from specaudit.analysis.logprob_parity import emitted_logprobs, logprob_parity

    return logprob_parity(records) if any(emitted_logprobs(r) is not None for r in records) else None


def analyze(
    run_dir: str | Path,
    *,
    alpha: float | None = None,
    delta: float | None = None,
    dimensions: list[str] | None = None,
    n_boot: int | None = None,
    seed: int | None = None,
    tolerance: tuple[float, float] | None = None,
    fallback_threshold: float | None = None,
    device: str | None = None,
    pair: ModelPair | None = None,
    equivalence: bool | None = None,
    deployment_cost_ratio: float | None = None,
    deployment_verify_cost: float | None = None,
    write: bool = True,
    settings: AnalysisSettings | None = None,
) -> dict:
    """Build (and by default write) run_dir/snapshot.json from the run's records.

    The analysis settings (specaudit.config.AnalysisSettings; its defaults where not given) come as
    keywords, or as `settings`, which the keywords given override."""
    given = {
        "alpha": alpha,
        "delta": delta,
        "dimensions": dimensions,
        "n_boot": n_boot,
        "seed": seed,
        "tolerance": tolerance,
        "fallback_threshold": fallback_threshold,
        "equivalence": equivalence,
        "deployment_cost_ratio": deployment_cost_ratio,
        "deployment_verify_cost": deployment_verify_cost,
    }
    base = settings.model_dump() if settings is not None else {}
    settings = AnalysisSettings.parse({**base, **{k: v for k, v in given.items() if v is not None}})
    alpha, delta, n_boot, seed = settings.alpha, settings.delta, settings.n_boot, settings.seed
    tolerance, fallback_threshold = settings.tolerance, settings.fallback_threshold
    dimensions = list(settings.dimensions) if settings.dimensions else None
    equivalence = settings.equivalence
    started = time.perf_counter()
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    if write:  # before minutes of scoring, not after
        check_output_paths([run_dir / SNAPSHOT_FILE], "snapshot")
    records = read_records(run_dir / RECORDS_FILE)
    if not records:
        raise InputError(f"{run_dir / RECORDS_FILE} has no records; run `specaudit run` first")
    dims = _dimensions(records, manifest, dimensions)
    if "context" in dims:
        from specaudit.stats.context import with_context_band

        records = with_context_band(records)  # the prompt-length band as an attribute, in memory only
    engines = sorted({r["engine"] for r in records})
    config = manifest.get("config", {})
    snapshot: dict[str, Any] = {
        "schema_version": SNAPSHOT_SCHEMA_VERSION,
        "run": {
            "id": run_dir.name,
            "dir": str(run_dir),
            "created": manifest.get("created"),
            "command": manifest.get("command"),
            "models": manifest.get("models"),
            "versions": manifest.get("versions"),
            "device": manifest.get("device"),
            "config": config,
            "prompt_set": manifest.get("prompt_set"),
            "seeds": manifest.get("seeds"),
            "engines": engines,
            "n_records": len(records),
            "n_prompts": len({r["prompt_id"] for r in records}),
            "n_output_tokens": sum(len(r["output_token_ids"]) for r in records if not r.get("timing_only")),
            "dimensions": dims,
        },
        "equivalence": {"status": EquivalenceStatus.NOT_RUN},
        "groups": {},
        "disparities": {},
        "recommendations": {},
        "prompts": [],
        "gate": None,
    }
    parity = _parity(records)
    if parity is not None:
        snapshot["logprob_parity"] = parity
    # Logprobs that are not the target's must not judge the outputs (issue 29): score them locally.
    distrusted = parity is not None and parity["status"] == CheckStatus.FAIL and server_scored(records)
    judged_records = [{**r, "target_logprobs": None} for r in records] if distrusted else records
    backend = ENGINES.get(manifest.get("backend") or "")
    if equivalence and pair is None and backend is not None and backend.scoring_pair:
        # an engine that scores with its own logits (llama.cpp), not a torch copy of the model (issue 17)
        pair = resolve(backend.scoring_pair)(manifest)
    unscorable = None
    if equivalence and pair is None and not server_scored(judged_records):
        from specaudit.models import load_pair

        draft = None if config.get("engines") == ["endpoint"] else config.get("draft")  # a server's draft is not ours to load
        try:
            pair = load_pair(
                config.get("target", "default"), draft, device=device or config.get("device", "auto"), dtype=config.get("dtype", "auto")
            )
        except InputError as err:
            if not distrusted:
                raise
            unscorable = f"not run: {parity['message']}, and the local target could not be loaded to score the outputs instead ({err})"
    scores = None
    if equivalence and unscorable:
        snapshot["equivalence"] = {"status": EquivalenceStatus.NOT_RUN, "message": unscorable, "engines": {}}
    elif equivalence:
        # With engines beside it, the screen's records are acceptance measurements; the engines'
        # own records are what the equivalence tests judge (and scoring every screened path again
        # would cost as much as the screen).
        judged = [r for r in judged_records if r["engine"] != SCREEN_ENGINE] if len(engines) > 1 else judged_records
        judged_dims = [d for d in dims if any(d in r.get("attributes", {}) for r in judged)]  # the subset may miss some
        snapshot["equivalence"], scores = equivalence_section(
            judged, pair, alpha=alpha, delta=delta, dimensions=judged_dims, seed=seed, plant_disparity=config.get("plant_disparity")
        )
        if distrusted:
            snapshot["equivalence"]["logprobs_note"] = (
                "the server's logprobs failed parity (logprob_parity), so the outputs were scored with the local target instead"
            )
    if any(r.get("concurrency") is not None for r in records):  # a run at several concurrency levels (endpoint, llama-server)
        judge_by_level(
            snapshot,
            judged_records,
            pair,
            alpha=alpha,
            delta=delta,
            dims=dims,
            seed=seed,
            n_boot=n_boot,
            equivalence=bool(equivalence and not unscorable),
        )
        from specaudit.analysis.acceptance_stability import acceptance_stability

        snapshot["acceptance_stability"] = acceptance_stability(records, n_boot=n_boot, seed=seed)
    speculative_engines = [e for e in engines if e != CONTROL_ENGINE]
    # Acceptance per group comes from the screen when the run has one (every prompt, exact in
    # expectation); speed-up columns need the vanilla control's timings and stay empty without it.
    if (SCREEN_ENGINE in engines or (CONTROL_ENGINE in engines and speculative_engines)) and dims:
        from specaudit.stats.disparity import disparity_section

        engine = (
            SCREEN_ENGINE if SCREEN_ENGINE in engines else SPECULATIVE_ENGINE if SPECULATIVE_ENGINE in engines else speculative_engines[0]
        )
        frame = pd.DataFrame(records)
        if engine == SCREEN_ENGINE:
            from specaudit.stats.predicted_speed import predicted_speed
            from specaudit.stats.screen_agreement import path_acceptance, screen_agreement

            frame, snapshot["speed"] = predicted_speed(frame, dimensions=dims, alpha=alpha)
            if SPECULATIVE_ENGINE in engines:
                snapshot["screen"] = screen_agreement(frame, int(config.get("max_new_tokens", 0)), path_acceptance(scores), alpha)
        decode = (lambda ids: pair.tokenizer.decode(ids)) if pair is not None else None
        declared = (manifest.get("prompt_set") or {}).get("dimensions") or {}
        # The prompt set's declared reference group (e.g. Standard American English), else the largest group.
        reference = {d: declared[d]["reference"] if declared.get(d, {}).get("reference") else "largest" for d in dims}
        parts = disparity_section(
            frame,
            dimensions=dims,
            engine=engine,
            baseline=CONTROL_ENGINE,
            alpha=alpha,
            n_boot=n_boot,
            seed=seed,
            reference=reference,
            tolerance=tolerance,
            fallback_threshold=fallback_threshold,
            deployment_cost_ratio=settings.deployment_cost_ratio,
            deployment_verify_cost=settings.deployment_verify_cost,
            acceptance_rule=(backend if backend is not None else ENGINES[engine]).acceptance_rule,
            decode=decode,
        )
        snapshot.update({key: parts[key] for key in ("groups", "disparities", "recommendations", "prompts")})
        snapshot["run"]["disparity_engine"] = engine
        snapshot["context"] = _context_part(frame, records, engine, snapshot["recommendations"], alpha=alpha, n_boot=n_boot, seed=seed)
    snapshot["run"]["analysis"] = {
        "alpha": alpha,
        "delta": delta,
        "n_boot": n_boot,
        "seed": seed,
        "tolerance": list(tolerance),
        "fallback_threshold": fallback_threshold,
        "deployment_cost_ratio": settings.deployment_cost_ratio,
        "deployment_verify_cost": settings.deployment_verify_cost,
        "seconds": round(time.perf_counter() - started, 2),
    }
    snapshot = load_snapshot(json_clean(snapshot))  # a section that breaks the contract fails here, not in a reader
    if write:
        write_json_atomic(run_dir / SNAPSHOT_FILE, snapshot)
    return snapshot
