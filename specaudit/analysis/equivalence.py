"""The snapshot's equivalence section: score the run's outputs, run the battery per engine
(specaudit.stats.equivalence), and judge the control, each engine's status and the battery."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE
from specaudit.contracts.snapshot import EngineEquivalence, EquivalenceSection, Violations
from specaudit.contracts.status import CheckStatus, EquivalenceStatus

if TYPE_CHECKING:
    from specaudit.models import ModelPair
    from specaudit.stats.scoring import TokenScores

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


def score_sampled(outputs: list[dict], pair: ModelPair, plant_disparity: str | None = None) -> tuple[TokenScores, dict[str, Any]]:
    """Teacher-forced target scores of sampled outputs, with the draft's only where teacher forcing
    reproduces the q decoding used (a planted disparity is mixed in on its group's records, as
    decoding did); returns (TokenScores, the draft-scoring note)."""
    from specaudit.decoding.call_invariance import draft_batch_invariance
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


FAMILY_RULE = "Holm across the battery's tests per engine; any impossible token fails"


@dataclass(frozen=True)
class Battery:
    """What every equivalence battery of one analysis runs with: the pair that scores the outputs
    (None where a server's logprobs do), the family's alpha, the TV margin delta, the dimensions
    flagged groups are named by, the seed; for the sections that also measure per level or cache
    state, the bootstrap resamples and whether the battery runs at all (False: metrics only)."""

    pair: ModelPair | None
    alpha: float
    delta: float
    dimensions: list[str]
    seed: int
    n_boot: int = 0
    equivalence: bool = True

    def at(self, alpha: float) -> Battery:
        """The same battery judged at another family's alpha (a level's, a cache state's)."""
        return replace(self, alpha=alpha)


def equivalence_section(
    records: list[dict], battery: Battery, *, plant_disparity: str | None = None
) -> tuple[EquivalenceSection, TokenScores | None]:
    """The equivalence section, and the teacher-forced TokenScores it judged (None where the run
    was greedy or scored from a server's logprobs): the battery per engine, then each judge in turn."""
    pair, alpha, delta, dimensions, seed = battery.pair, battery.alpha, battery.delta, battery.dimensions, battery.seed
    outputs = [r for r in records if not r.get("timing_only")]
    engines = sorted({r["engine"] for r in outputs}, key=lambda e: (e != CONTROL_ENGINE, e))
    greedy = float(outputs[0]["sampling"]["temperature"]) == 0.0
    notes: dict[str, Any] = {}  # how the outputs were scored, where that needs saying
    # Records a server proved broken (token ids outside the vocabulary) cannot be scored against a
    # local model; judge_server_violations fails their engine. Server logprobs score them all: there
    # the broken positions carry probability 0, impossible tokens.
    scored = [r for r in outputs if not r.get("server_violations")]
    scores = None
    if greedy:
        entries = _greedy_entries(scored, pair, engines)
    else:
        if not any(r["output_token_ids"] for r in scored) and not server_scored(outputs):
            # every output was proven broken (judge_server_violations fails each engine): nothing is left to score
            broken = {r["engine"] for r in outputs if r.get("server_violations") or r.get("verify_violations")}
            entries = {
                engine: EngineEquivalence(verdict=CheckStatus.FAIL if engine in broken else EquivalenceStatus.NOT_RUN) for engine in engines
            }
        elif server_scored(outputs):  # an endpoint run: the server's own logprobs, no local model
            from specaudit.stats.logprob_scores import scores_from_logprobs

            scored = outputs
            scores = scores_from_logprobs(outputs)
            notes["scoring"] = {
                "source": "logprobs returned by the servers (top-N per token)",
                "note": "PIT exact from the top-N; the surprisal martingale needs the full distribution and is not applicable "
                "where the top-N does not hold all of it; no draft, so no draft affinity or acceptance calibration",
            }
        else:
            scores, notes["draft_scoring"] = score_sampled(scored, pair, plant_disparity)
        if scores is not None:
            entries = _sampled_entries(outputs, scored, scores, engines, alpha=alpha, delta=delta, dimensions=dimensions, seed=seed)
    entries = {
        name: judge_server_violations(judge_verify_violations(entry, outputs, name), outputs, name) for name, entry in entries.items()
    }
    control_alpha = alpha * CONTROL_ALPHA_FACTOR
    if CONTROL_ENGINE in entries:
        entries[CONTROL_ENGINE] = judge_control(entries[CONTROL_ENGINE], control_alpha)
    warning = control_warning(entries.get(CONTROL_ENGINE), alpha, control_alpha)
    entries = {name: judge_status(entry, delta, warning=warning if name == CONTROL_ENGINE else None) for name, entry in entries.items()}
    section = EquivalenceSection(
        mode="greedy" if greedy else "sampling",
        alpha=alpha,
        delta=delta,
        family_rule=FAMILY_RULE,
        control=CONTROL_ENGINE,
        engines=entries,
        **notes,
        control_alpha=control_alpha,
        **({"control_warning": warning} if warning else {}),
        **judge_battery(entries),
    )
    return section, scores


def _greedy_entries(scored: list[dict], pair: ModelPair, engines: list[str]) -> dict[str, EngineEquivalence]:
    """Greedy runs: each speculative engine's outputs against the control's, token for token."""
    from specaudit.stats import equivalence as eq

    entries = {}
    for engine in engines:
        if engine != CONTROL_ENGINE:
            result = eq.greedy_exactness(scored, pair.target, engine=engine, reference=CONTROL_ENGINE)
            entries[engine] = EngineEquivalence(verdict=result.verdict, greedy=result.to_dict())
    return entries


def _sampled_entries(
    outputs: list[dict],
    scored: list[dict],
    scores: TokenScores,
    engines: list[str],
    *,
    alpha: float,
    delta: float,
    dimensions: list[str],
    seed: int,
) -> dict[str, EngineEquivalence]:
    """Sampled runs: per engine, goodness of fit to the target, the TV bound, the power, and the
    two-sample test against the control."""
    from specaudit.stats import equivalence as eq
    from specaudit.stats.power import minimum_detectable_effects

    n_prompts = len({r["prompt_id"] for r in outputs})
    entries = {}
    for engine in engines:
        if not any(r["output_token_ids"] for r in scored if r["engine"] == engine) and any(
            r.get("verify_violations") or r.get("server_violations") for r in outputs if r["engine"] == engine
        ):
            entries[engine] = EngineEquivalence(verdict=CheckStatus.FAIL)  # nothing to test: its verify (or server) broke at once
            continue
        engine_scores = scores.select(engine=engine)
        gof = eq.goodness_of_fit(engine_scores, scored, engine=engine, by=dimensions, alpha=alpha, seed=seed)
        samples = sum(1 for r in outputs if r["engine"] == engine)
        tests: dict[str, Any] = {
            "goodness_of_fit": gof.to_dict(),
            "tv_bound": eq.tv_bound(engine_scores, engine=engine, delta=delta, alpha=alpha, seed=seed).to_dict(),
            "pit_bound": _pit_bound(engine_scores, alpha=alpha, seed=seed),
            "power": minimum_detectable_effects(
                gof.n_tokens, samples / max(n_prompts, 1), n_prompts=n_prompts, alpha=alpha, n_tests=max(len(gof.gate), 1)
            ),
        }
        verdict = gof.verdict
        if engine != CONTROL_ENGINE and CONTROL_ENGINE in engines:
            two = eq.two_sample(scored, scores, engine=engine, reference=CONTROL_ENGINE, by=dimensions, alpha=alpha, seed=seed)
            tests["two_sample"] = two.to_dict()
            verdict = CheckStatus.FAIL if two.verdict == CheckStatus.FAIL else verdict
        entries[engine] = EngineEquivalence(verdict=verdict, **tests)
    return entries


def _pit_bound(scores: TokenScores, *, alpha: float, seed: int) -> dict[str, Any]:
    """The PIT distortion bound at 1 − alpha over the tokens the PIT test reads (possible ones,
    the same V draws): the battery's positive statement beside the TV bound."""
    from specaudit.stats import equivalence as eq

    frame = scores.tokens.reset_index(drop=True)
    u = eq.pit_values(frame, seed)[frame["p"].to_numpy(float) > 0]
    return eq.pit_distortion_bound(u, 1.0 - alpha).to_dict()


def _judge_proven_violations(
    entry: EngineEquivalence, outputs: list[dict], engine: str, field: str, sentence: Callable[[list[dict], dict], str]
) -> EngineEquivalence:
    """The engine failed on what its records list under `field`: each item is a proven bug, whatever
    the statistical tests say about the tokens emitted. `sentence(found, summary)` words the finding."""
    found = [{"record": r["key"], **v} for r in outputs if r["engine"] == engine for v in r.get(field) or []]
    if not found:
        return entry
    summary = {"count": len(found), "records": len({f["record"] for f in found}), "first": found[0], "examples": found[:5]}
    # model_copy does not validate: the summary is made the typed section here
    return entry.model_copy(
        update={field: Violations.model_validate(summary), "verdict": CheckStatus.FAIL, "message": sentence(found, summary)}
    )


def judge_verify_violations(entry: EngineEquivalence, outputs: list[dict], engine: str) -> EngineEquivalence:
    """An engine whose verify function broke its contract at any call (the engine records each
    such call) fails: an impossible return value is a proven bug of the sampler."""
    return _judge_proven_violations(
        entry,
        outputs,
        engine,
        "verify_violations",
        lambda found, summary: (
            f"the verify function broke its contract in {len(found)} call(s); first: call {summary['first']['call']} of record "
            f"{summary['first']['record']}, it {summary['first']['problem']} (a proven bug of this sampler)"
        ),
    )


def judge_server_violations(entry: EngineEquivalence, outputs: list[dict], engine: str) -> EngineEquivalence:
    """An engine whose server returned what no correct server can (a token id outside the
    vocabulary; the endpoint backend records each on the record) fails: a proven bug of that server."""
    return _judge_proven_violations(
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


def _gross(control: EngineEquivalence, control_alpha: float) -> bool:
    """A rejection of the control at its own level, an impossible token, or a proven violation
    (a server's impossible output, a verify call that broke its contract): the audit is void. A
    test with no p-value (nothing left to test once the proven violations are set aside) rejects nothing."""
    if control.server_violations or control.verify_violations:
        return True
    gof = control.goodness_of_fit  # the test's own fields pass through the contract as extras
    pvalue = getattr(gof, "pvalue", None)
    rejected = isinstance(pvalue, (int, float)) and pvalue < control_alpha
    impossible = gof.impossible_tokens if gof is not None else None
    return rejected or bool(impossible is not None and impossible.statistic)


def judge_control(control: EngineEquivalence, control_alpha: float) -> EngineEquivalence:
    """The vanilla control judged at control_alpha (alpha x CONTROL_ALPHA_FACTOR): FAIL (the audit is
    void) on a gross rejection, an impossible token or a proven violation, WARN when only alpha rejects."""
    if control.verdict != CheckStatus.FAIL or (
        control.goodness_of_fit is None and not (control.server_violations or control.verify_violations)
    ):
        return control
    return control.model_copy(update={"verdict": CheckStatus.FAIL if _gross(control, control_alpha) else CheckStatus.WARN})


def control_warning(control: EngineEquivalence | None, alpha: float, control_alpha: float) -> str | None:
    """The section's `control_warning` for a judged control that was rejected at alpha alone (WARN)."""
    if control is None or control.verdict != CheckStatus.WARN or control.goodness_of_fit is None:
        return None
    return (
        f"the vanilla control was rejected at alpha = {alpha:g} (Holm p = {control.goodness_of_fit.pvalue:.3g}) but "
        f"not at the control level {control_alpha:g}: a correct control is rejected at alpha in 1 "
        "audit of 20; rerun with another --seed to tell chance from a scoring mismatch"
    )


def judge_status(entry: EngineEquivalence, delta: float, *, warning: str | None = None) -> EngineEquivalence:
    """The engine's EquivalenceStatus and its reason, agreeing with its verdict: a control rejected
    at alpha alone (verdict WARN, `warning` its sentence) is judged at its own level, where nothing
    rejects, so it is NO_VIOLATION_FOUND, not VIOLATION."""
    from specaudit.stats import equivalence as eq

    results = {test: getattr(entry, test) for test in ("greedy", "goodness_of_fit", "two_sample")}
    status, reason = eq.engine_status(results, entry.tv_bound, delta)
    if warning is not None and entry.verdict == CheckStatus.WARN:
        status, reason = EquivalenceStatus.NO_VIOLATION_FOUND, warning
    return entry.model_copy(update={"status": status, "status_reason": reason})


def judge_battery(engines: dict[str, EngineEquivalence]) -> dict[str, Any]:
    """The battery's status (and `control_failed`, `message` where they apply) from the judged engines."""
    control = engines.get(CONTROL_ENGINE)
    audited = [e for e in engines if e not in (CONTROL_ENGINE, SCREEN_ENGINE)]  # screen records are target samples
    if control is not None and control.verdict == CheckStatus.FAIL:
        return {
            "status": CheckStatus.FAIL,
            "control_failed": True,
            "message": "the vanilla control failed its own goodness-of-fit: the audit cannot be trusted (scoring/warping mismatch?)",
        }
    if not audited:
        return {"status": EquivalenceStatus.NOT_RUN, "message": "no speculative engine in the run"}
    return {"status": CheckStatus.FAIL if any(engines[e].verdict == CheckStatus.FAIL for e in audited) else CheckStatus.PASS}
