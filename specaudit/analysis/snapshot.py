"""analyze: a run folder (records.jsonl + manifest.json) -> snapshot.json, validated against the
snapshot contract before it is written."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from pydantic import ValidationError

from specaudit._files import check_output_paths, write_json_atomic
from specaudit._validation import did_you_mean
from specaudit.analysis.concurrency import levels_of, split_alpha
from specaudit.analysis.engine_faults import engine_faults
from specaudit.analysis.equivalence import Battery, equivalence_section, server_scored
from specaudit.analysis.invariants import output_invariants, output_limits, without_contradicting_counters
from specaudit.config import AnalysisSettings
from specaudit.contracts.engines import ENGINES, resolve
from specaudit.contracts.run import CONTROL_ENGINE, FAULTS_FILE, SCREEN_ENGINE, SPECULATIVE_ENGINE
from specaudit.contracts.snapshot import (
    SNAPSHOT_FILE,
    SNAPSHOT_SCHEMA_VERSION,
    AnalysisBlock,
    ConcurrencySection,
    EquivalenceSection,
    LogprobParitySection,
    RunSection,
    Snapshot,
    build_snapshot,
    first_problem,
    snapshot_document,
)
from specaudit.contracts.status import CheckStatus, EquivalenceStatus
from specaudit.errors import InputError
from specaudit.execution.faults import read_faults
from specaudit.execution.records import MANIFEST_FILE, RECORDS_FILE, read_manifest, read_records

if TYPE_CHECKING:
    from specaudit.contracts.engines import EngineSpec
    from specaudit.models import ModelPair
    from specaudit.stats.scoring import TokenScores


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


def _context_part(
    frame: pd.DataFrame, records: list[dict], engine: str, recommendations: dict[str, Any], **options: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """snapshot.context (stats.context; typed as ContextSection when the snapshot is validated):
    acceptance by prompt length and output position, and the recommendations with the
    prompt-length fallback's sentence joining the context dimension's advice."""
    from specaudit.stats.context import CONTEXT_DIMENSION, context_section
    from specaudit.stats.disparity.per_prompt import per_prompt_metrics

    paired = CONTROL_ENGINE in set(frame["engine"]) or engine == SCREEN_ENGINE
    per_prompt = per_prompt_metrics(frame, engine=engine, baseline=CONTROL_ENGINE) if paired else None
    part = context_section(records, engine, per_prompt=per_prompt, **options)
    advice = recommendations.get(CONTEXT_DIMENSION)
    if isinstance(advice, dict) and part["length_fallback"]:
        advice = {**advice, "messages": [*advice.get("messages", []), part["findings"][-1]]}
        recommendations = {**recommendations, CONTEXT_DIMENSION: advice}
    return part, recommendations


def judge_by_level(equivalence: EquivalenceSection, concurrency: ConcurrencySection | None) -> EquivalenceSection:
    """The equivalence section judged by the concurrency section (analysis.concurrency): a level
    where equivalence fails fails the run's equivalence, naming the level, even where the pooled
    battery passed."""
    if concurrency is None or not concurrency.failed_levels:
        return equivalence
    engines = dict(equivalence.engines)
    for level in concurrency.failed_levels:
        battery = concurrency.equivalence.get(str(level))
        independence = concurrency.independence.get(str(level)) or {}
        for name, entry in engines.items():
            if entry.verdict == CheckStatus.FAIL:
                continue  # failed already (pooled, or at a lower level)
            at_level = battery.engines.get(name) if battery is not None else None
            if at_level is not None and at_level.verdict == CheckStatus.FAIL:
                status = at_level.status
            elif (independence.get(name) or {}).get("verdict") == CheckStatus.FAIL:
                status = EquivalenceStatus.VIOLATION
            else:
                continue
            engines[name] = entry.model_copy(update={"verdict": CheckStatus.FAIL, "status": status, "status_reason": concurrency.message})
    message = f"{equivalence.message}; {concurrency.message}" if equivalence.control_failed else concurrency.message
    update = {"status": CheckStatus.FAIL, "failed_concurrency_levels": concurrency.failed_levels, "message": message}
    return equivalence.model_copy(update={**update, "engines": engines})


def _parity(records: list[dict]) -> LogprobParitySection | None:
    """The logprob parity section (analysis.logprob_parity) where a server returned logprobs."""
    from specaudit.analysis.logprob_parity import emitted_logprobs, logprob_parity

    return logprob_parity(records) if any(emitted_logprobs(r) is not None for r in records) else None


def _stage_seconds(records: list[dict]) -> dict[str, float]:
    """Decoding time by stage, from the records: the screen's (each record's share of its batch)
    and the engines' (their wall time, timing repeats included). A predicted rerun scales these."""
    screen = sum(float((r.get("screen") or {}).get("row_s") or 0.0) for r in records if r["engine"] == SCREEN_ENGINE)
    engines = sum(float(r.get("wall_s") or 0.0) for r in records if r["engine"] != SCREEN_ENGINE)
    return {"screen": round(screen, 2), "engines": round(engines, 2)}


def _run_section(run_dir: Path, manifest: dict, records: list[dict], dims: list[str]) -> RunSection:
    """`run`: the manifest's identity of the run, and what its records hold."""
    try:
        return RunSection(
            id=run_dir.name,
            dir=str(run_dir),
            created=manifest.get("created"),
            command=manifest.get("command"),
            models=manifest.get("models"),
            versions=manifest.get("versions"),
            device=manifest.get("device"),
            config=manifest.get("config", {}),
            prompt_set=manifest.get("prompt_set"),
            seeds=manifest.get("seeds"),
            engines=sorted({r["engine"] for r in records}),
            n_records=len(records),
            n_prompts=len({r["prompt_id"] for r in records}),
            n_output_tokens=sum(len(r["output_token_ids"]) for r in records if not r.get("timing_only")),
            dimensions=dims,
            stage_seconds=_stage_seconds(records),
        )
    except ValidationError as err:
        raise InputError(f"{run_dir / MANIFEST_FILE}: {first_problem(err)}; the run folder is damaged") from None


def _restores_loaded_tokenizer(function: Callable[..., dict]) -> Callable[..., dict]:
    """analyze makes the analysed pair's tokenizer the one grammars are matched on (a target scored
    outside torch loads no torch pair), then gives the process back the one it had."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> dict:
        from specaudit.models import loaded_tokenizer, remember_tokenizer

        previous = loaded_tokenizer()
        try:
            return function(*args, **kwargs)
        finally:
            remember_tokenizer(previous)

    return wrapper


@_restores_loaded_tokenizer
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
    reference: dict[str, str] | None = None,
    write: bool = True,
    settings: AnalysisSettings | None = None,
) -> Snapshot:
    """Build (and by default write) run_dir/snapshot.json from the run's records; return the typed
    snapshot, the one a reader gets from the file.

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
        "reference": reference,
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
    faults = read_faults(run_dir)  # engine calls that failed: counted (engine_faults), never scored
    if not records and faults:
        raise InputError(
            f"{run_dir / RECORDS_FILE} has no records: every engine call of the run failed ({len(faults)} in {run_dir / FAULTS_FILE}; "
            f"first: {faults[0].engine} on prompt {faults[0].prompt_id}: {faults[0].error}: {' '.join(faults[0].message.split())})"
        )
    if not records:
        raise InputError(f"{run_dir / RECORDS_FILE} has no records; run `specaudit run` first")
    dims = _dimensions(records, manifest, dimensions)
    if "context" in dims:
        from specaudit.stats.context import with_context_band

        records = with_context_band(records)  # the prompt-length band as an attribute, in memory only
    config = manifest.get("config", {})
    run = _run_section(run_dir, manifest, records, dims)
    parity = _parity(records)
    # Logprobs that are not the target's must not judge the outputs (issue 29): score them locally.
    distrusted = parity is not None and parity.status == CheckStatus.FAIL and server_scored(records)
    judged_records = [{**r, "target_logprobs": None} for r in records] if distrusted else records
    judged_records = without_contradicting_counters(judged_records)  # output_invariants reports them
    backend = ENGINES.get(manifest.get("backend") or "")
    pair, unscorable = _scoring_pair(pair, manifest, backend, judged_records, parity if distrusted else None, equivalence, device)
    if pair is not None:  # a grammar is matched on the analysed target's tokens (restored on return)
        from specaudit.models import remember_tokenizer

        remember_tokenizer(pair.tokenizer)
    section, scores = EquivalenceSection(status=EquivalenceStatus.NOT_RUN), None
    if equivalence and unscorable:
        section = EquivalenceSection(status=EquivalenceStatus.NOT_RUN, message=unscorable, engines={})
    elif equivalence:
        # With engines beside it, the screen's records are acceptance measurements; the engines'
        # own records are what the equivalence tests judge (and scoring every screened path again
        # would cost as much as the screen).
        judged = [r for r in judged_records if r["engine"] != SCREEN_ENGINE] if len(run.engines) > 1 else judged_records
        judged_dims = [d for d in dims if any(d in r.get("attributes", {}) for r in judged)]  # the subset may miss some
        # A run at several concurrency levels is also judged per level (below): alpha is split
        # and so is a run with --prefix-cache, per cache state (analysis.prefix_cache)
        from specaudit.analysis.prefix_cache import states_of

        pooled_alpha = split_alpha(alpha, levels_of(judged_records), len(states_of(judged_records))).pooled
        section, scores = equivalence_section(
            judged, Battery(pair, pooled_alpha, delta, judged_dims, seed), plant_disparity=config.get("plant_disparity")
        )
        if distrusted:
            note = "the server's logprobs failed parity (logprob_parity), so the outputs were scored with the local target instead"
            section = section.model_copy(update={"logprobs_note": note})
    parts: dict[str, Any] = {} if parity is None else {"logprob_parity": parity}
    parts["output_invariants"] = output_invariants(records, output_limits(manifest, pair))
    parts["engine_faults"] = engine_faults(records, faults)
    # the per-level and per-cache-state batteries: the run's alpha (split there), all its dimensions
    battery = Battery(pair, alpha, delta, dims, seed, n_boot=n_boot, equivalence=bool(equivalence and not unscorable))
    if any(r.get("concurrency") is not None for r in records):  # a run at several concurrency levels (endpoint, llama-server)
        from specaudit.analysis.acceptance_stability import acceptance_stability
        from specaudit.analysis.concurrency import concurrency_section
        from specaudit.analysis.prefix_cache import states_of

        parts["concurrency"] = concurrency_section(judged_records, battery, states=len(states_of(judged_records)))
        section = judge_by_level(section, parts["concurrency"])
        parts["acceptance_stability"] = acceptance_stability(records, n_boot=n_boot, seed=seed)
    from specaudit.analysis.prefix_cache import judge_by_state, prefix_cache_section

    cache = prefix_cache_section(judged_records, battery)  # a run with --prefix-cache: the battery per cache state
    if cache is not None:
        parts["prefix_cache"] = cache
        section = judge_by_state(section, cache)
    from specaudit.analysis.identity import identity_section

    identity = identity_section(records, manifest, pair=pair, alpha=alpha)  # a run with --draft target (analysis.identity)
    if identity is not None:
        parts["identity"] = identity
    from specaudit.analysis.shapes import shapes_section

    shapes = shapes_section(records, config, dims, n_boot=n_boot, seed=seed)  # a run with the tree or staged engine
    if shapes is not None:
        parts["shapes"] = shapes
    disparity = _disparity_parts(records, manifest, dims, scores, pair, backend, settings)
    if "disparity_engine" in disparity:
        run = run.model_copy(update={"disparity_engine": disparity.pop("disparity_engine")})
    analysis = AnalysisBlock(
        alpha=alpha,
        delta=delta,
        n_boot=n_boot,
        seed=seed,
        tolerance=list(tolerance),
        fallback_threshold=fallback_threshold,
        deployment_cost_ratio=settings.deployment_cost_ratio,
        deployment_verify_cost=settings.deployment_verify_cost,
        **({"reference": settings.reference} if settings.reference else {}),
        seconds=round(time.perf_counter() - started, 2),
    )
    # The statistics modules' payloads (groups, disparities, ..., context) are typed here, once, as
    # every reader reads them back (strict JSON, NaN as null): one that breaks the contract is one
    # sentence, before anything is written.
    snapshot = build_snapshot(
        {
            "schema_version": SNAPSHOT_SCHEMA_VERSION,
            "run": run.model_copy(update={"analysis": analysis}),
            "equivalence": section,
            "groups": disparity.pop("groups", {}),
            "disparities": disparity.pop("disparities", {}),
            "recommendations": disparity.pop("recommendations", {}),
            "prompts": disparity.pop("prompts", []),
            "gate": None,
            **parts,
            **disparity,  # speed, screen, context
        }
    )
    if write:
        write_json_atomic(run_dir / SNAPSHOT_FILE, snapshot_document(snapshot))
    return snapshot


def _scoring_pair(
    pair: ModelPair | None,
    manifest: dict,
    backend: EngineSpec | None,
    records: list[dict],
    distrusted: LogprobParitySection | None,
    equivalence: bool,
    device: str | None,
) -> tuple[ModelPair | None, str | None]:
    """The pair that scores the outputs (the one given, the engine's own scoring pair, or the run's
    models loaded here; None where the server's logprobs score them), and why the outputs cannot be
    scored, where the server's logprobs were distrusted and the local target will not load."""
    config = manifest.get("config", {})
    if equivalence and pair is None and backend is not None and backend.scoring_pair:
        # an engine that scores with its own logits (llama.cpp), not a torch copy of the model (issue 17)
        pair = resolve(backend.scoring_pair)(manifest)
    if equivalence and pair is None and not server_scored(records):
        from specaudit.models import load_pair

        draft = config.get("draft")
        if backend is not None and (backend.remote_models or draft in backend.own_drafts):
            draft = None  # a server's draft, or one only its engine runs, is not ours to load: the target scores alone
        try:
            pair = load_pair(
                config.get("target", "default"), draft, device=device or config.get("device", "auto"), dtype=config.get("dtype", "auto")
            )
        except InputError as err:
            if distrusted is None:
                raise
            return None, f"not run: {distrusted.message}, and the local target could not be loaded to score the outputs instead ({err})"
    return pair, None


def compared_acceptance(frame: pd.DataFrame, backend: EngineSpec | None) -> tuple[str, ...]:
    """The acceptance metrics groups are compared on, the headline (and gated) one first: the
    engine's accepted / proposed; where the engine accepts by a rule of its own (llama.cpp's greedy
    draft, kept while the target's draw equals it) that rate is the rule's, what decides its users'
    speed-up, and mean β̄ = Σ min(p, q) (`position_beta`) is compared beside it as what rejection
    sampling would give this pair, where every record the comparison reads carries it."""
    if backend is None or backend.rejection_sampling or "position_beta" not in frame.columns:
        return ("acceptance_rate",)
    sampled = frame[~frame["timing_only"].fillna(False).astype(bool)] if "timing_only" in frame.columns else frame  # repeats carry no β
    audited = sampled[sampled["engine"].isin([SCREEN_ENGINE] if SCREEN_ENGINE in set(frame["engine"]) else [SPECULATIVE_ENGINE])]
    carried = audited["position_beta"].map(lambda beta: isinstance(beta, list) and len(beta) > 0)
    return ("acceptance_rate", "mean_beta") if len(audited) and bool(carried.all()) else ("acceptance_rate",)


def _references(dims: list[str], manifest: dict, given: dict[str, str] | None) -> tuple[dict[str, str], dict[str, str]]:
    """Each dimension's reference group and why: given (--reference DIM=GROUP, or the config's
    `analysis: reference:`), else the prompt set's declared one (e.g. Standard American English),
    else the best-served group, the one with the highest acceptance (never the largest group with
    ties broken by name: a user's prompt file often has groups of equal size)."""
    from specaudit.stats.disparity.frame import BEST_SERVED

    unknown = sorted(set(given or {}) - set(dims))
    if unknown:
        raise InputError(
            f"--reference names dimension(s) {', '.join(unknown)} that this run does not compare; its dimensions: {', '.join(dims)}"
            + did_you_mean(unknown[0], dims)
        )
    declared = (manifest.get("prompt_set") or {}).get("dimensions") or {}
    name = (manifest.get("prompt_set") or {}).get("name") or "the prompt set"
    reference, reasons = {}, {}
    for d in dims:
        if given and d in given:
            reference[d], reasons[d] = given[d], "given (--reference)"
        elif (declared.get(d) or {}).get("reference"):
            reference[d], reasons[d] = declared[d]["reference"], f"declared by the prompt set ({name})"
        else:
            reference[d], reasons[d] = BEST_SERVED, "best-served: the group with the highest acceptance (no reference given or declared)"
    return reference, reasons


def _disparity_parts(
    records: list[dict],
    manifest: dict,
    dims: list[str],
    scores: TokenScores | None,
    pair: ModelPair | None,
    backend: EngineSpec | None,
    settings: AnalysisSettings,
) -> dict[str, Any]:
    """The group comparisons (groups, disparities, recommendations, prompts), the context section,
    and on a screened run the speed and screen sections; with `disparity_engine`, the engine whose
    records they measure. Empty for a run without groups to compare."""
    engines = sorted({r["engine"] for r in records})
    speculative_engines = [e for e in engines if e != CONTROL_ENGINE]
    # Acceptance per group comes from the screen when the run has one (every prompt, exact in
    # expectation); speed-up columns need the vanilla control's timings and stay empty without it.
    if not ((SCREEN_ENGINE in engines or (CONTROL_ENGINE in engines and speculative_engines)) and dims):
        return {}
    from specaudit.stats.cost_model import step_costs
    from specaudit.stats.disparity import disparity_section

    alpha, n_boot, seed = settings.alpha, settings.n_boot, settings.seed
    config = manifest.get("config", {})
    engine = SCREEN_ENGINE if SCREEN_ENGINE in engines else SPECULATIVE_ENGINE if SPECULATIVE_ENGINE in engines else speculative_engines[0]
    frame = pd.DataFrame(records)
    screened: dict[str, Any] = {}
    # c and v in plain decoding steps, measured on the timed records, for the advice (without them:
    # each group's draft time over its verification time, v = 1)
    measured = step_costs(frame)
    machine_costs = {"cost_ratio": measured[0], "verify_cost": measured[1]} if measured is not None else {}
    if engine == SCREEN_ENGINE:
        from specaudit.stats.predicted_speed import predicted_speed
        from specaudit.stats.screen_agreement import path_acceptance, screen_agreement

        frame, screened["speed"] = predicted_speed(frame, dimensions=dims, alpha=alpha)
        if SPECULATIVE_ENGINE in engines:
            screened["screen"] = screen_agreement(frame, int(config.get("max_new_tokens", 0)), path_acceptance(scores), alpha)
    decode = (lambda ids: pair.tokenizer.decode(ids)) if pair is not None else None
    reference, reasons = _references(dims, manifest, settings.reference)
    acceptance = compared_acceptance(frame, backend)
    parts = disparity_section(
        frame,
        dimensions=dims,
        engine=engine,
        baseline=CONTROL_ENGINE,
        alpha=alpha,
        n_boot=n_boot,
        seed=seed,
        reference=reference,
        tolerance=settings.tolerance,
        fallback_threshold=settings.fallback_threshold,
        **machine_costs,
        deployment_cost_ratio=settings.deployment_cost_ratio,
        deployment_verify_cost=settings.deployment_verify_cost,
        acceptance_rule=(backend if backend is not None else ENGINES[engine]).acceptance_rule,
        test_metrics=(*acceptance, "speedup"),
        gated_metrics=(acceptance[0], "speedup"),
        decode=decode,
    )
    context, recommendations = _context_part(frame, records, engine, parts["recommendations"], alpha=alpha, n_boot=n_boot, seed=seed)
    for dimension, reason in reasons.items():
        if dimension in parts["groups"]:
            parts["groups"][dimension]["reference_reason"] = reason
    return {
        "groups": parts["groups"],
        "disparities": parts["disparities"],
        "recommendations": recommendations,
        "prompts": parts["prompts"],
        "disparity_engine": engine,
        **screened,
        "context": context,
    }
