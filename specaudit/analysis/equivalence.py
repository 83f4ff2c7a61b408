"""The snapshot's equivalence section: score the run's outputs, run the battery per engine
(specaudit.stats.equivalence), and judge the control, each engine's status and the battery."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE
from specaudit.contracts.status import CheckStatus, EquivalenceStatus

if TYPE_CHECKING:
    from specaudit.models import ModelPair

# The control asks "is the auditor itself broken?" (a scoring or warping mismatch), which shows
# as a gross rejection. Judged at alpha it would void 1 audit in 20 by chance, so it is judged
# at alpha x this factor; a rejection between the two levels is reported as a warning.
CONTROL_ALPHA_FACTOR = 0.02


def server_scored(records: list[dict]) -> bool:
    """Sampled records that carry the logprobs of the distribution they were sampled from (an
    endpoint run) are scored from those, without a local model: the server's own distribution is
    the one it claims to sample from (a local copy of the model may differ in kernels or weights)."""
    from specaudit.stats.logprob_scores import carries_sampling_logprobs

    outputs = [r for r in records if not r.get("timing_only")]
    return bool(outputs) and float(outputs[0]["sampling"]["temperature"]) != 0.0 and carries_sampling_logprobs(outputs)


def score_sampled(outputs: list[dict], pair: ModelPair, plant_disparity: str | None = None):
    """Teacher-forced target scores of sampled outputs, with the draft's only where teacher forcing
    reproduces the q decoding used (a planted disparity is mixed in on its group's records, as
    decoding did); returns (TokenScores, the draft-scoring note)."""
    from specaudit.engines.screen import draft_batch_invariance
    from specaudit.models import DisparityPlant
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


def equivalence_section(
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


def _judge_proven_violations(entry: dict, outputs: list[dict], engine: str, field: str, sentence) -> None:
    """Fail the engine on what its records list under `field`: each item is a proven bug, whatever
    the statistical tests say about the tokens emitted. `sentence(found, summary)` words the finding."""
    found = [{"record": r["key"], **v} for r in outputs if r["engine"] == engine for v in r.get(field) or []]
    if not found:
        return
    entry[field] = {"count": len(found), "records": len({f["record"] for f in found}), "first": found[0], "examples": found[:5]}
    entry["verdict"] = CheckStatus.FAIL
    entry["message"] = sentence(found, entry[field])


def judge_verify_violations(entry: dict, outputs: list[dict], engine: str) -> None:
    """Fail an engine whose verify function broke its contract at any call (the engine records
    each such call): an impossible return value is a proven bug of the sampler."""
    _judge_proven_violations(
        entry,
        outputs,
        engine,
        "verify_violations",
        lambda found, summary: (
            f"the verify function broke its contract in {len(found)} call(s); first: call {summary['first']['call']} of record "
            f"{summary['first']['record']}, it {summary['first']['problem']} (a proven bug of this sampler)"
        ),
    )


def judge_server_violations(entry: dict, outputs: list[dict], engine: str) -> None:
    """Fail an engine whose server returned what no correct server can (a token id outside the
    vocabulary; the endpoint backend records each on the record): a proven bug of that server."""
    _judge_proven_violations(
        entry,
        outputs,
        engine,
        "server_violations",
        lambda found, summary: (
            f"the {engine} server returned impossible output at {len(found)} position(s) of {summary['records']} record(s); "
            f"first: record {summary['first']['record']} position {summary['first']['position']}: {summary['first']['problem']} "
            "(a proven bug of that server)"
        ),
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
