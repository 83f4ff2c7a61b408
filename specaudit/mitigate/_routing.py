"""Policies for any draft: fitted on the audit's own records of the training prompts, then
re-audited by timing plain and speculative decoding on held-out prompts.

Nothing here trains or teacher-forces a draft, so it works for every draft the engines can
decode with (int8, early-exit, ngram, another model) and for screened audits, whose per-prompt
acceptance and speed-up come from the screen and the audit's cost model.

Fit (training prompts only): per group, the per-position acceptance α = Σ accepted / Σ positions
reached and the speed-up at the run's k with its 95% prompt-bootstrap interval, read from the
audit's records exactly as `analyze` reads them (stats.disparity.per_prompt_metrics; for the
screen, the cost model's per-prompt predictions, analysis.predicted_speed); one cost ratio c for
the machine. `group_policy` turns those into k and routing.

Re-audit (held-out prompts): each timed prompt is decoded by plain decoding, by speculation at
the run's k (what the audit deployed: no policy) and, for a group the policy speculates on at
another k, at that k, in rotating order. Times are per output token. A group's speed-up is
Σ plain time per token / Σ speculative time per token over its prompts (every prompt weighs
the same, as in `analyze`); under the policy a routed group's time is its plain decoding's time,
measured, so its speed-up with the policy is 1 and what routing buys it is its time without the
policy over that. Intervals: 95% prompt bootstrap.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from specaudit.mitigate._reaudit import _bootstrap
from specaudit.mitigate._run_folder import Prompt

if TYPE_CHECKING:
    import torch

    from specaudit.decoding import SamplingSpec
    from specaudit.models import ModelPair, NgramDraft

OVERALL = "(overall)"


def _ratio_of_sums(numerator: np.ndarray, denominator: np.ndarray, seed: int) -> dict | None:
    """Σ numerator / Σ denominator over prompts with its prompt-bootstrap interval (None for no
    prompts; no interval from one prompt, whose resamples are all that prompt)."""
    if not len(numerator) or denominator.sum() <= 0:
        return None
    if len(numerator) < 2:
        return {"value": float(numerator.sum() / denominator.sum()), "ci_low": None, "ci_high": None, "n_prompts": 1}
    entry = _bootstrap(lambda w: (w @ numerator) / np.maximum(w @ denominator, 1e-300), len(numerator), seed)
    return {**entry, "n_prompts": int(len(numerator))}


# ------------------------------------------------------------------ fit on the audit
def audit_evidence(records: list[dict], train_ids: list[str], group_of: dict[str, str], seed: int) -> dict:
    """Per group of the training prompts: α, the speed-up at the run's k with its interval and
    where it comes from; and the machine's cost ratio c (one draft step over one verification
    step, pooled over every prompt the speculative engine timed)."""
    from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE, SPECULATIVE_ENGINE
    from specaudit.stats.cost_model import step_costs
    from specaudit.stats.disparity.per_prompt import per_prompt_metrics
    from specaudit.stats.predicted_speed import predicted_speed

    frame = pd.DataFrame(records)
    engines = set(frame["engine"])
    engine = SCREEN_ENGINE if SCREEN_ENGINE in engines else SPECULATIVE_ENGINE if SPECULATIVE_ENGINE in engines else None
    if engine is None:
        others = sorted(e for e in engines if e != CONTROL_ENGINE)
        engine = others[0] if others else None
    speed_source = "none"
    if engine == SCREEN_ENGINE:
        frame, speed = predicted_speed(frame)
        if speed.get("source") == "cost model":
            speed_source = "the audit's cost model (screen)"
    elif engine is not None and CONTROL_ENGINE in engines:
        speed_source = "measured (engines)"
    groups: dict[str, dict] = {}
    cost_ratio, verify_cost, cost_source = float("nan"), 1.0, "not measured"
    if engine is not None:
        table = per_prompt_metrics(frame, engine=engine)
        train = table.loc[[p for p in train_ids if p in table.index]]
        for group in sorted({group_of[p] for p in train.index if group_of.get(p) is not None}):
            rows = train[[group_of.get(p) == group for p in train.index]]
            # α over the prompts whose positions reached are known (records with acceptance totals
            # only, vLLM's n-gram steps, have none): Σ accepted / Σ reached of the same prompts
            known = rows[np.isfinite(rows["reached"].to_numpy(float)) & np.isfinite(rows["accepted"].to_numpy(float))]
            reached = known["reached"].to_numpy(float)
            alpha = float(known["accepted"].sum() / reached.sum()) if reached.sum() > 0 else float("nan")
            paired = rows[np.isfinite(rows["vanilla_latency_per_token_s"]) & np.isfinite(rows["latency_per_token_s"])]
            speedup = None
            if speed_source != "none" and len(paired):
                speedup = _ratio_of_sums(
                    paired["vanilla_latency_per_token_s"].to_numpy(float), paired["latency_per_token_s"].to_numpy(float), seed
                )
            groups[group] = {"alpha": alpha, "n_prompts": int(len(rows)), "speedup_run_k": speedup}
        if SPECULATIVE_ENGINE in engines:
            measured = step_costs(frame)
            if measured is not None:
                cost_ratio, verify_cost = measured
                cost_source = (
                    "the audit's records, in plain decoding steps (vanilla time per token after the first): draft time per "
                    "proposed token (c), verification time per step after the prompt pass (v)"
                )
            else:  # no vanilla timings to measure a plain step against: c per verification step, v = 1
                timed = per_prompt_metrics(frame, engine=SPECULATIVE_ENGINE)
                draft_s, verify_s = timed["draft_s"].sum(), timed["verify_s"].sum()
                proposed, steps = timed["latency_proposed"].sum(), timed["latency_steps"].sum()
                if proposed > 0 and steps > 0 and verify_s > 0:
                    cost_ratio = float((draft_s / proposed) / (verify_s / steps))
                    cost_source = "the audit's speculative records (draft time per proposed token / verification time per step)"
    return {
        "engine": engine,
        "speed_source": speed_source,
        "cost_ratio": cost_ratio,
        "verify_cost": verify_cost,
        "cost_source": cost_source,
        "groups": groups,
    }


# ------------------------------------------------------------------ re-audit on held-out prompts
# One timed decoding of a prompt: (prompt token ids, k, seed) -> (wall seconds, output tokens),
# plain decoding at k = 0. The audit's own engines supply it: torch (torch_decoder) or the run's
# engine (EngineSpec.run_decoder: llama.cpp's, vLLM's), so policies are re-audited where they were fitted.
Decode = Callable[[list[int], int, int], tuple[float, int]]


def torch_decoder(
    pair: ModelPair, draft: torch.nn.Module | NgramDraft | None, *, spec: SamplingSpec, eos_ids: set[int], max_new_tokens: int
) -> Decode:
    """specaudit's own plain and speculative engines on `pair` with `draft`."""
    import torch

    from specaudit.decoding import speculative_generate, vanilla_generate

    def decode(prompt_ids: list[int], k: int, seed: int) -> tuple[float, int]:
        generator = torch.Generator(device=pair.device).manual_seed(seed)
        common = dict(spec=spec, max_new_tokens=max_new_tokens, generator=generator, eos_ids=eos_ids, vocab_size=pair.vocab_size)
        if k == 0:
            out = vanilla_generate(pair.target, prompt_ids, **common)
        else:
            out = speculative_generate(pair.target, draft, prompt_ids, k=k, **common)
        return out.wall_s, len(out.tokens)

    return decode


def reaudit_policies(
    decode: Decode,
    held_groups: dict[str, list[Prompt]],
    policies: dict[str, dict],
    *,
    run_k: int,
    max_new_tokens: int,
    seed: int,
    progress: bool = False,
) -> dict:
    """Time plain decoding, speculation at the run's k, and speculation at each speculating
    group's policy k on the held-out prompts; per group and overall, the speed-up without and
    with the policy and the policy's gain (time without / time with), with intervals."""
    from tqdm.auto import tqdm

    from specaudit.execution.plan import derive_seed

    jobs = [(g, p) for g, prompts in held_groups.items() for p in prompts]
    per_token: dict[str, dict[str, float]] = {}
    tokens_total = {"vanilla": 0, "run_k": 0, "policy_k": 0}
    with tqdm(total=len(jobs), desc="timing held-out prompts", unit="prompt", disable=not progress, file=sys.stderr) as bar:
        for index, (group, prompt) in enumerate(jobs):
            policy = policies.get(group) or {}
            ways = {"vanilla": 0, "run_k": run_k}
            if not policy.get("route_to_vanilla", True) and int(policy.get("k", run_k)) != run_k:
                ways["policy_k"] = int(policy["k"])
            order = list(ways)
            order = order[index % len(order) :] + order[: index % len(order)]  # rotate: no way always runs first
            times = {}
            for way in order:
                wall, tokens = decode(prompt.ids, ways[way], derive_seed(seed, prompt.id, 0))
                times[way] = wall / max(tokens, 1)
                tokens_total[way] += tokens
            per_token[prompt.id] = times
            bar.update(1)

    def policy_time(group: str, prompt_id: str) -> float:
        policy, times = policies.get(group) or {}, per_token[prompt_id]
        if policy.get("route_to_vanilla", True):
            return times["vanilla"]
        return times.get("policy_k", times["run_k"])

    rows: dict[str, dict] = {}
    labelled = [(g, p.id) for g, p in jobs]
    for label in [*held_groups, OVERALL]:
        members = [(g, pid) for g, pid in labelled if label in (OVERALL, g)]
        if not members:
            continue
        vanilla = np.array([per_token[pid]["vanilla"] for _, pid in members])
        without = np.array([per_token[pid]["run_k"] for _, pid in members])
        with_policy = np.array([policy_time(g, pid) for g, pid in members])
        rows[label] = {
            "n_prompts": len(members),
            "speedup_without_policy": _ratio_of_sums(vanilla, without, seed),
            "speedup_with_policy": _ratio_of_sums(vanilla, with_policy, seed),
            "gain_with_policy": _ratio_of_sums(without, with_policy, seed),
        }
        if label != OVERALL:
            policy = policies.get(label) or {}
            rows[label]["route_to_vanilla"] = bool(policy.get("route_to_vanilla", True))
            rows[label]["k"] = 0 if rows[label]["route_to_vanilla"] else int(policy.get("k", run_k))
            speed = rows[label]["speedup_with_policy"] or {}
            rows[label]["slower_than_vanilla_with_policy"] = bool(speed.get("ci_high") is not None and speed["ci_high"] < 1.0)
    named = [g for g in rows if g != OVERALL]
    return {
        "method": "per held-out prompt, plain decoding, speculation at the run's k (no policy) and at the policy's k where it "
        "differs, in rotating order, one run each; speed-up = sum of plain time per token / sum of speculative time per token "
        "over the group's prompts; under the policy a routed group decodes plainly, so its time is the plain run's; "
        "gain = time per token without the policy / with it; intervals: 95% prompt bootstrap",
        "run_k": run_k,
        "max_new_tokens": max_new_tokens,
        "tokens": tokens_total,
        "groups": rows,
        "routed": [g for g in named if rows[g]["route_to_vanilla"]],
        "slower_than_vanilla_with_policy": [g for g in named if rows[g]["slower_than_vanilla_with_policy"]],
        "per_prompt_time_per_token_s": per_token,
    }
