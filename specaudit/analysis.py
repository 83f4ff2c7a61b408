"""analyze: a run folder (records.jsonl + manifest.json) → snapshot.json.

The snapshot is the one contract that report, gate and monitor read (docs/ARCHITECTURE.md, Contracts).
This module only composes: the statistics live in specaudit.stats.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specaudit._files import check_output_paths, json_clean, write_json_atomic
from specaudit.config import AnalysisSettings
from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE
from specaudit.contracts.snapshot import SNAPSHOT_FILE, SNAPSHOT_SCHEMA_VERSION
from specaudit.contracts.status import CheckStatus, EquivalenceStatus
from specaudit.errors import InputError
from specaudit.records import RECORDS_FILE, read_manifest, read_records

# The control asks "is the auditor itself broken?" (a scoring or warping mismatch), which shows
# as a gross rejection. Judged at alpha it would void 1 audit in 20 by chance, so it is judged
# at alpha x this factor; a rejection between the two levels is reported as a warning.
CONTROL_ALPHA_FACTOR = 0.02


def _dimensions(records: list[dict], manifest: dict, requested: list[str] | None) -> list[str]:
    present = sorted({name for r in records for name in r.get("attributes", {})})
    if requested:
        missing = [d for d in requested if d not in present]
        if missing:
            raise InputError(
                f"--dimensions {', '.join(missing)}: the run's prompts have no such attribute (they have {', '.join(present) or 'none'})"
            )
        return list(requested)
    declared = list((manifest.get("prompt_set") or {}).get("dimensions") or {})
    return [d for d in declared if d in present] or present


def server_scored(records: list[dict]) -> bool:
    """Sampled records that carry the logprobs of the distribution they were sampled from (an
    endpoint run) are scored from those, without a local model: the server's own distribution is
    the one it claims to sample from (a local copy of the model may differ in kernels or weights)."""
    from specaudit.stats.logprob_scores import carries_sampling_logprobs

    outputs = [r for r in records if not r.get("timing_only")]
    return bool(outputs) and float(outputs[0]["sampling"]["temperature"]) != 0.0 and carries_sampling_logprobs(outputs)


def score_sampled(outputs: list[dict], pair, plant_disparity: str | None = None):
    """Teacher-forced target scores of sampled outputs, with the draft's only where teacher forcing
    reproduces the q decoding used (a planted disparity is mixed in on its group's records, as
    decoding did); returns (TokenScores, the draft-scoring note)."""
    from specaudit.models import DisparityPlant
    from specaudit.screen import draft_batch_invariance
    from specaudit.stats.scoring import score_records

    invariance = draft_batch_invariance(pair, outputs)
    draft_model = pair.draft if pair.draft_is_model and invariance.get("batch_invariant") else None
    plant = DisparityPlant.parse(plant_disparity) if plant_disparity else None
    if pair.draft_is_model and draft_model is None and invariance.get("checked"):  # unchecked: no draft in the run
        invariance["note"] = (
            f"teacher-forced draft distributions differ from the ones decoding used (TV up to {invariance['max_tv']:.2f}); "
            "draft-affinity is skipped; acceptance calibration and the step PIT use what the engine recorded at run time"
        )
    scores = score_records(pair.target, outputs, draft_model=draft_model, draft_plant=plant, device=pair.device)
    return scores, invariance


def _equivalence(
    records: list[dict], pair, *, alpha: float, delta: float, dimensions: list[str], seed: int, plant_disparity: str | None = None
) -> tuple[dict, Any]:
    """The equivalence section, and the teacher-forced TokenScores it judged (None where the run
    was greedy or scored from a server's logprobs)."""
    from specaudit.stats import equivalence as eq
    from specaudit.stats.power import minimum_detectable_effects

    outputs = [r for r in records if not r.get("timing_only")]
    engines = sorted({r["engine"] for r in outputs}, key=lambda e: (e != CONTROL_ENGINE, e))
    greedy = float(outputs[0]["sampling"]["temperature"]) == 0.0
    section: dict[str, Any] = {
        "mode": "greedy" if greedy else "sampling",
        "alpha": alpha,
        "delta": delta,
        "family_rule": "Holm across the battery's tests per engine; any impossible token fails",
        "control": CONTROL_ENGINE,
        "engines": {},
    }
    scores = None
    # Records a server proved broken (token ids outside the vocabulary) cannot be scored against a
    # local model; judge_server_violations fails their engine. Server logprobs score them all: there
    # the broken positions carry probability 0, impossible tokens.
    scored = [r for r in outputs if not r.get("server_violations")]
    if greedy:
        for engine in engines:
            if engine == CONTROL_ENGINE:
                continue
            result = eq.greedy_exactness(scored, pair.target, engine=engine, reference=CONTROL_ENGINE)
            section["engines"][engine] = {"verdict": result.verdict, "greedy": result.to_dict()}
    elif server_scored(outputs):  # an endpoint run: the server's own logprobs, no local model
        from specaudit.stats.logprob_scores import scores_from_logprobs

        scored = outputs
        scores = scores_from_logprobs(outputs)
        section["scoring"] = {
            "source": "logprobs returned by the servers (top-N per token)",
            "note": "PIT exact from the top-N; the surprisal martingale needs the full distribution and is not applicable "
            "where the top-N does not hold all of it; no draft, so no draft affinity or acceptance calibration",
        }
    else:
        scores, section["draft_scoring"] = score_sampled(scored, pair, plant_disparity)
    if not greedy:
        n_prompts = len({r["prompt_id"] for r in outputs})
        for engine in engines:
            if not any(r["output_token_ids"] for r in scored if r["engine"] == engine) and any(
                r.get("verify_violations") or r.get("server_violations") for r in outputs if r["engine"] == engine
            ):
                section["engines"][engine] = {"verdict": CheckStatus.FAIL}  # nothing to test: its verify (or server) broke at once
                continue
            engine_scores = scores.select(engine=engine)
            gof = eq.goodness_of_fit(engine_scores, scored, engine=engine, by=dimensions, alpha=alpha, seed=seed)
            entry: dict[str, Any] = {"verdict": gof.verdict, "goodness_of_fit": gof.to_dict()}
            entry["tv_bound"] = eq.tv_bound(engine_scores, engine=engine, delta=delta, alpha=alpha, seed=seed).to_dict()
            samples = sum(1 for r in outputs if r["engine"] == engine)
            entry["power"] = minimum_detectable_effects(
                gof.n_tokens, samples / max(n_prompts, 1), n_prompts=n_prompts, alpha=alpha, n_tests=max(len(gof.gate), 1)
            )
            if engine != CONTROL_ENGINE and CONTROL_ENGINE in engines:
                two = eq.two_sample(scored, scores, engine=engine, reference=CONTROL_ENGINE, by=dimensions, alpha=alpha, seed=seed)
                entry["two_sample"] = two.to_dict()
                if two.verdict == CheckStatus.FAIL:
                    entry["verdict"] = CheckStatus.FAIL
            section["engines"][engine] = entry
    for engine in engines:
        if engine in section["engines"]:
            judge_verify_violations(section["engines"][engine], outputs, engine)
            judge_server_violations(section["engines"][engine], outputs, engine)
    audited = [e for e in section["engines"] if e not in (CONTROL_ENGINE, SCREEN_ENGINE)]  # screen records are target samples
    control = section["engines"].get(CONTROL_ENGINE)
    judge_control(section, alpha)
    judge_statuses(section, delta)
    if control is not None and control["verdict"] == CheckStatus.FAIL:
        section["status"] = CheckStatus.FAIL
        section["control_failed"] = True
        section["message"] = "the vanilla control failed its own goodness-of-fit: the audit cannot be trusted (scoring/warping mismatch?)"
    elif not audited:
        section["status"] = EquivalenceStatus.NOT_RUN
        section["message"] = "no speculative engine in the run"
    else:
        verdicts = [section["engines"][e]["verdict"] for e in audited]
        section["status"] = CheckStatus.FAIL if CheckStatus.FAIL in verdicts else CheckStatus.PASS
    return section, scores


def judge_verify_violations(entry: dict, outputs: list[dict], engine: str) -> None:
    """Fail an engine whose verify function broke its contract at any call (the engine records
    each such call): an impossible return value is a proven bug of the sampler, whatever the
    statistical tests say about the tokens it did emit."""
    found = [{"record": r["key"], **v} for r in outputs if r["engine"] == engine for v in r.get("verify_violations") or []]
    if not found:
        return
    first = found[0]
    entry["verify_violations"] = {"count": len(found), "records": len({f["record"] for f in found}), "first": first, "examples": found[:5]}
    entry["verdict"] = CheckStatus.FAIL
    entry["message"] = (
        f"the verify function broke its contract in {len(found)} call(s); first: call {first['call']} of record "
        f"{first['record']}, it {first['problem']} (a proven bug of this sampler)"
    )


def judge_server_violations(entry: dict, outputs: list[dict], engine: str) -> None:
    """Fail an engine whose server returned what no correct server can (a token id outside the
    vocabulary; the endpoint backend records each on the record): a proven bug of that server."""
    found = [{"record": r["key"], **v} for r in outputs if r["engine"] == engine for v in r.get("server_violations") or []]
    if not found:
        return
    first = found[0]
    entry["server_violations"] = {"count": len(found), "records": len({f["record"] for f in found}), "first": first, "examples": found[:5]}
    entry["verdict"] = CheckStatus.FAIL
    entry["message"] = (
        f"the {engine} server returned impossible output at {len(found)} position(s) of {entry['server_violations']['records']} "
        f"record(s); first: record {first['record']} position {first['position']}: {first['problem']} (a proven bug of that server)"
    )


def judge_control(section: dict, alpha: float) -> None:
    """Judge the vanilla control at alpha x CONTROL_ALPHA_FACTOR: FAIL (the audit is void) on a
    gross rejection or an impossible token, WARN (with `control_warning`) when only alpha rejects."""
    section["control_alpha"] = alpha * CONTROL_ALPHA_FACTOR
    control = section["engines"].get(CONTROL_ENGINE)
    if control is None or control["verdict"] != CheckStatus.FAIL or "goodness_of_fit" not in control:
        return
    gof = control["goodness_of_fit"]
    gross = gof.get("pvalue", 0.0) < section["control_alpha"] or bool((gof.get("impossible_tokens") or {}).get("statistic"))
    control["verdict"] = CheckStatus.FAIL if gross else CheckStatus.WARN
    if not gross:
        section["control_warning"] = (
            f"the vanilla control was rejected at alpha = {alpha:g} (Holm p = {gof['pvalue']:.3g}) but not at "
            f"the control level {section['control_alpha']:g}: a correct control is rejected at alpha in 1 "
            "audit of 20; rerun with another --seed to tell chance from a scoring mismatch"
        )


def path_acceptance(scores) -> dict[str, list[float]]:
    """Per speculative record, a_t = min(1, q_t(x_t) / p_t(x_t)) along its own emitted tokens, from
    the teacher-forced scores (p and q at every position; empty without a scored draft)."""
    if scores is None or not scores.has_draft:
        return {}
    tokens = scores.tokens[scores.tokens["engine"] == "speculative"].sort_values(["key", "position"])
    p, q = tokens["p"].to_numpy(float), tokens["q"].to_numpy(float)
    accept = np.where(p > 0, np.minimum(1.0, q / np.where(p > 0, p, 1.0)), 0.0)
    return {str(key): list(values) for key, values in pd.Series(accept, index=tokens.index).groupby(tokens["key"])}


def _engine_run_rate(run: dict) -> float:
    """accepted / proposed of one engine run, counting accepted drafts only inside its emitted
    tokens: a step can accept drafts past an end-of-sequence token it also accepted, and the path
    (with the screen's a_t) ends there."""
    from specaudit.screen import accepted_on_path

    steps = run.get("accepted_per_step")
    accepted = accepted_on_path(steps, len(run["output_token_ids"])) if isinstance(steps, list) and steps else run["accepted"]
    return accepted / run["proposed"]


def _given_engine_paths(engine: pd.DataFrame, path_accept: dict[str, list[float]], max_new_tokens: int) -> dict:
    """Each engine run's acceptance rate against what the screen's programme gives one run along
    that run's own path: the same a_t and step structure with the path held fixed. Given its path
    a run's rate has a known mean and variance (screen.run_rate_moments) and runs are independent,
    so the sum of their differences is normal to good accuracy."""
    from scipy import stats

    from specaudit.screen import run_rate_moments

    observed, expected, variance = [], [], []
    for run in engine.to_dict("records"):
        path = path_accept.get(str(run.get("key")))
        if path is None or not isinstance(run.get("accepted_per_step"), list) or not run["proposed"]:
            continue
        mean, var = run_rate_moments(path, int(run["k"]), max_new_tokens)
        if math.isfinite(mean):
            observed.append(_engine_run_rate(run))
            expected.append(mean)
            variance.append(var)
    if not observed or sum(variance) <= 0:
        return {
            "note": "not run: no teacher-forced draft scores of the engine's paths (analysis without equivalence, or a call-dependent draft)"
        }
    total, sd = sum(expected), math.sqrt(sum(variance))
    z = (sum(observed) - total) / sd
    half = stats.norm.ppf(0.975) * sd
    return {
        "value": sum(observed) / total,
        "ci_low": (sum(observed) - half) / total,
        "ci_high": (sum(observed) + half) / total,
        "pvalue": float(2 * stats.norm.sf(abs(z))),
        "n_runs": len(observed),
        "method": "each run's rate against its mean and variance given the run's path (screen.run_rate_moments), normal",
    }


def screen_agreement(
    frame: pd.DataFrame, max_new_tokens: int, path_accept: dict[str, list[float]] | None = None, alpha: float = 0.05
) -> dict:
    """Does the screen reproduce the speculative engine? Two tests on the prompts both ran, Holm
    over them (WARN when either is rejected at alpha):

    - same prompts: the engine's acceptance rate over the screen's, per prompt the mean of one
      run's rate accepted / proposed (the engine's accepted drafts counted inside its output),
      paired Fieller interval (stats.disparity.intervals) and the paired t-test it inverts. One
      run's rate averages above the ratio of expected counts (screen._acceptance, Jensen), so the
      screen's side is the same quantity: E[accepted / proposed] of one run along each screened
      path (`expected_run_rate`; exact counts for deterministic drafts). It covers the whole claim
      (target-distributed paths and acceptance along them): about ±2.5% on the default audit.
    - given the engine's paths (`path_accept`: a_t along each engine run from the teacher-forced
      scores): the acceptance model alone, each run's path held fixed and its rate's mean and
      variance given the path computed exactly. About ±2.7% on the default audit: one run's own
      chance, which is most of the first test's noise too. A rejection here points at the model (a
      draft whose q depends on the call, an engine that accepts by another rule); the first test
      rejected alone shows no error of the model (the paths differ, or the runs were lucky)."""
    from scipy import stats as scipy_stats

    from specaudit.screen import expected_run_rate
    from specaudit.stats import holm
    from specaudit.stats.disparity.intervals import ratio_interval

    timing_only = frame["timing_only"].fillna(False).astype(bool) if "timing_only" in frame else False
    runs = frame[(frame["proposed"] > 0) & ~timing_only]
    engine = runs[runs["engine"] == "speculative"]
    screen = runs[runs["engine"] == SCREEN_ENGINE]

    def screen_rate(row) -> float:
        exact = isinstance(row.get("screen"), dict) and row["screen"].get("counts") == "exact"
        if exact or not isinstance(row.get("position_accept"), list):  # deterministic drafts: one simulated run
            return row["accepted"] / row["proposed"]
        return expected_run_rate(row["position_accept"], int(row["k"]), max_new_tokens)

    shared = set(engine["prompt_id"]) & set(screen["prompt_id"])
    screen, engine = screen[screen["prompt_id"].isin(shared)], engine[engine["prompt_id"].isin(shared)]
    rates = {
        "speculative": pd.Series([_engine_run_rate(row) for row in engine.to_dict("records")], index=engine.index, dtype=float)
        .groupby(engine["prompt_id"])
        .mean(),
        SCREEN_ENGINE: pd.Series([screen_rate(row) for row in screen.to_dict("records")], index=screen.index, dtype=float)
        .groupby(screen["prompt_id"])
        .mean(),
    }
    both = pd.concat(rates, axis=1, join="inner").dropna()
    if len(both) < 2:
        return {"n_prompts": len(both), "note": "fewer than 2 prompts ran in both the screen and the speculative engine"}
    ids = both.index.to_numpy(dtype=object)
    x, y = both["speculative"].to_numpy(float), both[SCREEN_ENGINE].to_numpy(float)
    interval = ratio_interval(x, y, x_pairs=ids, y_pairs=ids)
    low, high = interval.confidence_interval()
    same = {"value": interval.ratio, "ci_low": low, "ci_high": high, "pvalue": float(scipy_stats.ttest_rel(x, y).pvalue)}
    given = _given_engine_paths(engine, path_accept or {}, max_new_tokens)
    tests = [test for test in (same, given) if "pvalue" in test]
    for test, adjusted in zip(tests, holm([t["pvalue"] for t in tests]), strict=True):
        test["pvalue_holm"] = float(adjusted)
        test["rejected"] = bool(adjusted < alpha)
    result = {
        "engine_over_screen_acceptance": same,
        "method": interval.method,
        "n_prompts": len(both),
        "given_engine_paths": given,
        "agrees": not any(t["rejected"] for t in tests),
    }
    if not result["agrees"]:
        same_text = f"the speculative engine's acceptance is {interval.ratio:.2f}× [{low:.2f}, {high:.2f}] the screen's on the {len(both)} prompts both ran"
        if given.get("rejected"):
            result["finding"] = (
                f"given the engine's own paths its acceptance is {given['value']:.3f}× [{given['ci_low']:.3f}, {given['ci_high']:.3f}] "
                f"what the screen's model gives those paths ({given['n_runs']} runs): the screen does not reproduce this engine, so "
                "per-group acceptance from the screen may be off (check that the draft's q does not depend on how it is called, "
                "and that the engine accepts by the rejection rule)"
            )
        elif "pvalue" in given:
            result["finding"] = (
                f"{same_text}; along the engine's own paths its acceptance is {given['value']:.3f}× [{given['ci_low']:.3f}, "
                f"{given['ci_high']:.3f}] what the screen's model gives them, so no error of the acceptance model is shown. "
                "A correct screen shows a difference like this on the same prompts in about 1 audit in 20 (rerun with another "
                "--seed); if it stays, the screen's target samples and the engine's outputs differ (see the equivalence tests, "
                "and docs/screen.md on the screen's batched sampling)"
            )
        else:
            result["finding"] = (
                f"{same_text}: the screen does not reproduce this engine, so per-group acceptance from the screen may be off "
                "(check that the draft's q does not depend on how it is called); a correct screen shows this in about 1 audit "
                "in 20, so rerun with another --seed before acting on it"
            )
    return result


def predicted_speed(frame: pd.DataFrame, *, dimensions: list[str] = (), alpha: float = 0.05) -> tuple[pd.DataFrame, dict]:
    """The screen's speed columns from a cost model fitted on the engines' timed subset
    (specaudit.stats.cost_model); the snapshot's `speed` section says how it was made and how
    well it predicted the timed prompts, overall and per group (a group mispredicted at Holm-adjusted
    p < alpha is a finding). Without enough timed prompts the columns stay empty."""
    from specaudit.stats import cost_model as cm

    timed = cm.timed_prompts(frame) if "speculative" in set(frame["engine"]) else pd.DataFrame()
    if len(timed) < cm.MIN_TIMED_PROMPTS:
        reason = (
            f"{len(timed)} prompt(s) timed by both vanilla and speculative decoding; the cost model needs "
            f"{cm.MIN_TIMED_PROMPTS} (run the engines beside the screen: --engines screen,vanilla,speculative)"
        )
        return frame, {"source": "none", "reason": reason}
    model = cm.fit_cost_model(timed)
    validation = cm.validate_cost_model(timed)
    screen = frame["engine"] == SCREEN_ENGINE
    rows = frame[screen]
    vanilla, speculative = model.predict(
        rows["prompt_token_ids"].map(len), rows["output_token_ids"].map(len), rows["steps"], rows["proposed"]
    )
    frame = frame.copy()
    frame.loc[screen, "predicted_vanilla_wall_s"] = vanilla
    frame.loc[screen, "predicted_wall_s"] = speculative
    measured = validation.per_prompt["measured"]
    attributes = frame.drop_duplicates("prompt_id").set_index("prompt_id")["attributes"]
    labels = {
        dimension: {pid: str(a[dimension]) for pid, a in attributes.items() if isinstance(a, dict) and dimension in a}
        for dimension in dimensions
    }
    group_checks = cm.validate_groups(validation, labels)
    by_group: dict[str, dict] = {}
    for check in group_checks:
        by_group.setdefault(check.dimension, {})[check.group] = check.to_dict()
    off = [c for c in group_checks if c.pvalue_holm < alpha]
    # One timed prompt cannot tell a group's effect from one timing's glitch (seen: the same prompt and
    # tokens timed 12% slower in another run, z = 4.1), so only replicated groups make a finding.
    mispredicted = [c for c in off if c.n_prompts >= cm.MIN_TIMED_PER_GROUP]
    single = [c for c in off if c.n_prompts < cm.MIN_TIMED_PER_GROUP]
    section = {
        "source": "cost model",
        "note": (
            "speed-up per group is predicted for every screened prompt from its expected steps and draft "
            f"proposals and the costs measured on {len(timed)} prompts timed by both engines; the group "
            "intervals hold the cost model fixed, and the validation below says how far to trust it"
        ),
        "cost_model": model.to_dict(),
        "validation": validation.to_dict(),
        "measured_speedup_timed_prompts": float(measured.mean()),
        "timed_prompts": [
            {"prompt_id": str(pid), "measured": float(m), "predicted": float(pr)}
            for pid, m, pr in zip(validation.per_prompt.index, measured, validation.per_prompt["predicted"], strict=True)
        ],
        "validation_by_group": by_group,
        "validation_by_group_tested": len(group_checks),
        "validation_by_group_smallest_pvalue_holm": min(
            (c.pvalue_holm for c in group_checks if math.isfinite(c.pvalue_holm)), default=None
        ),
        "validation_by_group_method": (
            "each group's log(measured / predicted) against the other timed prompts': t with the others' variance "
            "(a prediction interval, so one timed prompt suffices), Holm over every group of every dimension"
        ),
    }
    findings = []
    if not validation.holds:
        findings.append(
            f"measured speed-up / predicted = {validation.statistic:.2f} [{validation.ci_low:.2f}, {validation.ci_high:.2f}] "
            f"on {validation.n_prompts} timed prompts: the cost model misses something, so the predicted speed-ups "
            "per group are off by about this factor"
        )
    if mispredicted:
        listed = "; ".join(c.describe() for c in mispredicted)
        findings.append(
            f"measured / predicted speed-up differs for {len(mispredicted)} group(s) from the other timed prompts: {listed}; "
            "the cost model misses something about these groups, so their predicted speed-ups are off by about that factor"
        )
    if findings:
        section["finding"] = "; and ".join(findings)
    if single:
        section["single_prompt_outliers"] = (
            f"the one timed prompt of {len(single)} group(s) is off its prediction: {'; '.join(c.describe() for c in single)}; "
            "one timing's glitch looks the same, so this is not a finding: re-time with --timing-repeats 2 to tell"
        )
    return frame, section


def judge_statuses(section: dict, delta: float) -> None:
    """Each engine's EquivalenceStatus and its reason, agreeing with its verdict: a control rejected
    at alpha alone (verdict WARN) is judged at its own level, where nothing rejects, so it is
    NO_VIOLATION_FOUND, not VIOLATION."""
    from specaudit.stats import equivalence as eq

    for name, entry in section["engines"].items():
        results = {test: entry.get(test) for test in ("greedy", "goodness_of_fit", "two_sample")}
        status, reason = eq.engine_status(results, entry.get("tv_bound"), delta)
        if name == section.get("control") and entry.get("verdict") == CheckStatus.WARN:
            status, reason = EquivalenceStatus.NO_VIOLATION_FOUND, section.get("control_warning", reason)
        entry["status"], entry["status_reason"] = status, reason


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
    pair=None,
    equivalence: bool | None = None,
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
    if equivalence and pair is None and manifest.get("backend") == "llama-cpp":
        # llama.cpp runs are scored with llama.cpp's own logits, not a torch copy of the model (issue 17)
        from specaudit.backends.llama_cpp import scoring_pair

        pair = scoring_pair(manifest)
    if equivalence and pair is None and not server_scored(records):
        from specaudit.models import load_pair

        draft = None if config.get("engines") == ["endpoint"] else config.get("draft")  # a server's draft is not ours to load
        pair = load_pair(
            config.get("target", "default"), draft, device=device or config.get("device", "auto"), dtype=config.get("dtype", "auto")
        )
    scores = None
    if equivalence:
        # With engines beside it, the screen's records are acceptance measurements; the engines'
        # own records are what the equivalence tests judge (and scoring every screened path again
        # would cost as much as the screen).
        judged = [r for r in records if r["engine"] != SCREEN_ENGINE] if len(engines) > 1 else records
        judged_dims = [d for d in dims if any(d in r.get("attributes", {}) for r in judged)]  # the subset may miss some
        snapshot["equivalence"], scores = _equivalence(
            judged, pair, alpha=alpha, delta=delta, dimensions=judged_dims, seed=seed, plant_disparity=config.get("plant_disparity")
        )
    speculative_engines = [e for e in engines if e != CONTROL_ENGINE]
    # Acceptance per group comes from the screen when the run has one (every prompt, exact in
    # expectation); speed-up columns need the vanilla control's timings and stay empty without it.
    if (SCREEN_ENGINE in engines or (CONTROL_ENGINE in engines and speculative_engines)) and dims:
        from specaudit.stats.disparity import disparity_section

        engine = SCREEN_ENGINE if SCREEN_ENGINE in engines else "speculative" if "speculative" in engines else speculative_engines[0]
        frame = pd.DataFrame(records)
        if engine == SCREEN_ENGINE:
            frame, snapshot["speed"] = predicted_speed(frame, dimensions=dims, alpha=alpha)
            if "speculative" in engines:
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
            decode=decode,
        )
        snapshot.update({key: parts[key] for key in ("groups", "disparities", "recommendations", "prompts")})
        snapshot["run"]["disparity_engine"] = engine
    snapshot["run"]["analysis"] = {
        "alpha": alpha,
        "delta": delta,
        "n_boot": n_boot,
        "seed": seed,
        "tolerance": list(tolerance),
        "fallback_threshold": fallback_threshold,
        "seconds": round(time.perf_counter() - started, 2),
    }
    snapshot = json_clean(snapshot)
    if write:
        write_json_atomic(run_dir / SNAPSHOT_FILE, snapshot)
    return snapshot
