"""The identity-draft section: a run with `--draft target` checked against its engine's rule.

With q = p a correct verifier keeps each judged draft with a chance its rule fixes in advance
(specaudit.stats.identity): 1 for rejection sampling, max p_t for a greedy draft kept on a match.
This module reads the records: which drafts the verifier judged (from the per-step counts), what
it kept, and where the rule needs them the a_t along each output (a record's own
`position_accept`, which llama.cpp's records carry, else max p_t from the target's scored
distributions), and gives one test per engine. `analyze` adds it as the snapshot's `identity`
section; `specaudit selftest --identity` prints the same figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from specaudit.contracts.engines import ENGINES, IDENTITY_DRAFT, EngineSpec, resolve
from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE
from specaudit.contracts.snapshot import IdentityCheck, IdentitySection
from specaudit.contracts.status import CheckStatus
from specaudit.stats.identity import DEFAULT_TOLERANCE, GREEDY_MATCH, REJECTION_SAMPLING, IdentityDraftResult, identity_acceptance_test

if TYPE_CHECKING:
    from specaudit.decoding import SamplingSpec


def rule_of(spec: EngineSpec, config: Mapping[str, Any] | None = None) -> str:
    """The identity check's rule for an engine of the registry, in a run with `config` (the manifest's)
    where the engine's settings decide it (`run_rejection_sampling`)."""
    sampled = resolve(spec.run_rejection_sampling)(config or {}) if spec.run_rejection_sampling else spec.rejection_sampling
    return REJECTION_SAMPLING if sampled else GREEDY_MATCH


def judged_positions(record: dict) -> tuple[list[int], int] | None:
    """(output positions whose draft the verifier judged, drafts it kept there), from the record's
    per-step counts; None when it has none (an engine reporting totals only).

    A step starting at output position s with n of its k drafts kept judged positions s .. s + min(n + 1, k) − 1
    (a draft after the first rejection is never judged) and emitted n + 1 tokens. Positions past
    the record's tokens (drafts beyond an end-of-sequence token, or past the length budget) are
    left out: the path has no a_t there."""
    accepted, proposed = record.get("accepted_per_step") or [], record.get("proposed_per_step") or []
    if not proposed and record.get("proposed"):
        return None
    length = len(record.get("output_token_ids") or [])
    start, positions, kept = 0, [], 0
    for n, k in zip(accepted, proposed, strict=False):
        judged = min(n + 1, k)
        positions.extend(range(start, min(start + judged, length)))
        kept += max(0, min(n, judged, length - start))
        start += n + 1
    return positions, kept


def identity_check(
    records: Iterable[dict],
    rule: str,
    *,
    spec: SamplingSpec | None = None,
    pair: Any = None,
    alpha: float = 0.05,
    tolerance: float = DEFAULT_TOLERANCE,
) -> tuple[IdentityDraftResult, str]:
    """The test over one engine's records, and a note on what was left out (records with totals
    only, under a rule that needs the judged positions)."""
    chances: list[float] = []
    kept_total, totals_only, unscored = 0, 0, 0
    certain = rule == REJECTION_SAMPLING or (spec is not None and spec.greedy)  # a_t = 1: q = p, or the argmax at T = 0
    for record in records:
        judged = judged_positions(record)
        if judged is None:  # totals only: every proposed draft counted as judged (a rejection then counts each draft after it)
            if rule == GREEDY_MATCH:
                totals_only += 1
                continue
            chances.extend([1.0] * int(record.get("proposed") or 0))
            kept_total += int(record.get("accepted") or 0)
            continue
        positions, kept = judged
        if not positions:
            continue
        if not certain and record.get("position_accept") is None and (pair is None or spec is None):
            unscored += 1  # no a_t of its own and no target here to score it with
            continue
        along = [1.0] * (max(positions) + 1) if certain else _rule_chances(record, spec, pair)
        chances.extend(along[t] for t in positions)
        kept_total += kept
    notes = [f"{totals_only} record(s) report totals only and were left out (the rule needs the judged positions)"] if totals_only else []
    if unscored:
        notes.append(f"{unscored} record(s) carry no a_t and no target was at hand to score them; left out")
    note = "; ".join(notes)
    return identity_acceptance_test(kept_total, chances, rule=rule, alpha=alpha, tolerance=tolerance), note


def _rule_chances(record: dict, spec: SamplingSpec | None, pair: Any) -> list[float]:
    """a_t = p_t(argmax q_t) = max p_t along the record's output (q = p): the record's own
    `position_accept` where its engine wrote it, else the target's warped distribution there."""
    own = record.get("position_accept")
    if own is not None and len(own) == len(record["output_token_ids"]):
        return [float(a) for a in own]
    if pair is None or spec is None:
        raise ValueError("a greedy-match identity check needs the records' position_accept or a scoring pair")
    return max_target_probability(pair, record["prompt_token_ids"], record["output_token_ids"], spec)


def max_target_probability(pair: Any, prompt_ids: list[int], tokens: list[int], spec: SamplingSpec) -> list[float]:
    """max_x p_t(x) at each output position, p_t the target's warped distribution teacher-forced
    along prompt + tokens (the pair's target: a torch model or llama.cpp's scoring model)."""
    import torch

    from specaudit.decoding.warping import warp

    if not tokens:
        return []
    ids = torch.tensor([[*prompt_ids, *tokens[:-1]]], device=getattr(pair, "device", None))
    with torch.inference_mode():
        logits = pair.target(input_ids=ids).logits[0, len(prompt_ids) - 1 :, : pair.vocab_size]
    return warp(logits.double(), spec).max(dim=-1).values.tolist()


def identity_section(
    records: list[dict], manifest: dict, *, pair: Any = None, alpha: float = 0.05, tolerance: float = DEFAULT_TOLERANCE
) -> IdentitySection | None:
    """The snapshot's `identity` section for a run with `--draft target`; None for any other run."""
    from specaudit.decoding import SamplingSpec
    from specaudit.decoding.settings import setting_label

    config = manifest.get("config") or {}
    if config.get("draft") != IDENTITY_DRAFT:
        return None
    sampled = next((r.get("sampling") for r in records if r.get("sampling")), None)  # the records' setting, features included
    spec = (
        SamplingSpec.from_dict(sampled)
        if sampled
        else SamplingSpec(temperature=config.get("temperature", 1.0), top_k=config.get("top_k", 0), top_p=config.get("top_p", 1.0))
    )
    backend = ENGINES.get(manifest.get("backend") or "")
    engines: dict[str, IdentityCheck] = {}
    drafted: dict[str, str] = {}  # engine -> "d of n records drafted", said where nothing was judged
    for name in sorted({r["engine"] for r in records} - {CONTROL_ENGINE, SCREEN_ENGINE}):
        registry = backend or ENGINES.get(name)
        if registry is None:
            continue
        mine = [r for r in records if r["engine"] == name and not r.get("timing_only")]
        reported = [r for r in mine if r.get("proposed") is not None]  # batched OpenVINO requests report no drafted count
        drafted[name] = f"{name} drafted on {sum(r['proposed'] > 0 for r in reported)} of {len(reported)} records reporting drafts"
        result, note = identity_check(mine, rule_of(registry, config), spec=spec, pair=pair, alpha=alpha, tolerance=tolerance)
        engines[name] = IdentityCheck(engine=registry.name, message=result.describe() + (f"; {note}" if note else ""), **result.to_dict())
    failed = [name for name, check in engines.items() if check.verdict == CheckStatus.FAIL]
    judged = [name for name, check in engines.items() if check.verdict == CheckStatus.PASS]
    if failed:
        status, message = CheckStatus.FAIL, "; ".join(f"{name}: {engines[name].message}" for name in failed)
        if spec.features:  # the draft's processing is in the check as well as the verifier's
            message += (
                f"; the requests carry {', '.join(sorted(spec.features))}: an identity draft that proposes without them (vLLM's "
                "draft model, docs/vllm.md finding 5) is rejected where they move the argmax, a loss of speed, not of exactness, "
                "which the equivalence tests judge"
            )
    elif judged:
        status, message = CheckStatus.PASS, "; ".join(f"{name}: {engines[name].message}" for name in judged)
    else:
        status = CheckStatus.WARN
        message = (
            f"no drafted position was judged ({'; '.join(drafted.values()) or 'no drafting engine'}), so the identity draft showed nothing"
        )
    return IdentitySection(status=status, sampling=setting_label(spec), tolerance=tolerance, engines=engines, message=message)


__all__ = ["identity_check", "identity_section", "judged_positions", "max_target_probability", "rule_of"]
