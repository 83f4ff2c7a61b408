"""The snapshot's `output_invariants` section: every record of every engine checked against the
invariants of specaudit.execution.invariants (at most max_new_tokens, nothing after end-of-sequence
or a stop string, ids in the vocabulary, text = detokenised ids, counters consistent). Each
violation is proof of a bug, named by engine, record and position; no statistics are needed.

The limits come from the run: max_new_tokens from its config, the vocabulary size, end-of-sequence
ids and decoder from the target's tokenizer (the scoring pair's where one is loaded, else the
tokenizer the run names). A check whose input cannot be had (a tokenizer that does not load) is
listed under `skipped` with the reason, not passed silently.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from specaudit.contracts.snapshot import OutputInvariantsSection
from specaudit.contracts.status import CheckStatus
from specaudit.errors import InputError
from specaudit.execution.invariants import CHECKS, OutputLimits, counter_problems, record_violations

if TYPE_CHECKING:
    from specaudit.models import ModelPair

EXAMPLES = 10  # violations listed in the section (all are counted)


def tokenizer_name(manifest: dict) -> str:
    """The tokenizer the run's outputs are ids of: the one an endpoint run names, else the target's."""
    named = ((manifest.get("models") or {}).get("tokenizer") or {}).get("name")
    return str(named or (manifest.get("config") or {}).get("target") or "default")


def output_limits(manifest: dict, pair: ModelPair | None) -> OutputLimits:
    """The run's limits (see the module docstring)."""
    max_new = (manifest.get("config") or {}).get("max_new_tokens")
    max_new = max_new if isinstance(max_new, int) and not isinstance(max_new, bool) else None
    skipped: dict[str, str] = {}
    if max_new is None:
        skipped["length"] = "the manifest's config has no max_new_tokens"
    name = tokenizer_name(manifest)
    tokenizer, vocab_size = getattr(pair, "tokenizer", None), getattr(pair, "vocab_size", None)
    if tokenizer is None or vocab_size is None:
        try:
            from specaudit.models import load_tokenizer, vocabulary_size

            tokenizer = load_tokenizer(name)
            vocab_size = vocabulary_size(tokenizer, name)
        except InputError as err:
            why = f"the target's tokenizer did not load ({err})"
            skipped.update({check: why for check in CHECKS if check not in ("length", "counters")})
            return OutputLimits(max_new_tokens=max_new, skipped=skipped)
    eos = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
    configured = getattr(getattr(getattr(pair, "target", None), "generation_config", None), "eos_token_id", None)
    eos |= {int(v) for v in (configured if isinstance(configured, list) else [configured]) if isinstance(v, int)}
    if not eos:
        skipped["after-eos"] = "the target's tokenizer names no end-of-sequence token"

    cleans = bool(getattr(tokenizer, "clean_up_tokenization_spaces", False))  # a BPE tokenizer refuses the clean-up, with a warning

    def decode(ids: list[int], skip_special: bool, clean_up: bool) -> str:
        return tokenizer.decode(ids, skip_special_tokens=skip_special, clean_up_tokenization_spaces=clean_up and cleans)

    def grammar_error(grammar: str, ids: list[int], ended: bool) -> str | None:
        from specaudit.decoding.grammar import grammar_violation

        return grammar_violation(grammar, ids, ended, sorted(eos), tokenizer=tokenizer)

    return OutputLimits(
        max_new_tokens=max_new, vocab_size=vocab_size, eos_ids=frozenset(eos), decode=decode, grammar_error=grammar_error, skipped=skipped
    )


def output_invariants(records: list[dict], limits: OutputLimits) -> OutputInvariantsSection:
    """The section: every violation of every record, counted per engine and per check."""
    found = [{"engine": r["engine"], "record": r["key"], **v} for r in records for v in record_violations(r, limits)]
    engines: dict[str, dict[str, Any]] = {}
    for r in records:
        entry = engines.setdefault(r["engine"], {"records": 0, "records_violating": 0, "violations": 0})
        entry["records"] += 1
    for record in {f["record"]: f["engine"] for f in found}.values():
        engines[record]["records_violating"] += 1
    for f in found:
        engines[f["engine"]]["violations"] += 1
    by_check = Counter(f["check"] for f in found)
    checked = [c for c in CHECKS if c not in limits.skipped]
    if found:
        first = found[0]
        at = f" position {first['position']}" if first["position"] is not None else ""
        message = (
            f"{len(found)} output invariant violation(s) in {len({f['record'] for f in found})} record(s) "
            f"({', '.join(f'{c}: {n}' for c, n in by_check.items())}); first: {first['engine']} record {first['record']}{at}: "
            f"{first['problem']}"
        )
    else:
        message = f"{len(records)} records of {len(engines)} engine(s) hold {', '.join(checked)}"
        if limits.skipped:
            message += f"; not checked: {', '.join(limits.skipped)} ({next(iter(limits.skipped.values()))})"
    return OutputInvariantsSection(
        status=CheckStatus.FAIL if found else CheckStatus.PASS,
        records=len(records),
        checked=checked,
        engines=engines,
        checks={c: by_check.get(c, 0) for c in checked},
        skipped=limits.skipped,
        violations=len(found),
        **({"first": found[0]} if found else {}),
        examples=found[:EXAMPLES],
        message=message,
    )


PER_STEP_FIELDS = ("accepted_per_step", "proposed_per_step", "beta", "accept_prob", "step_pit")


def without_contradicting_counters(records: list[dict]) -> list[dict]:
    """`records`, where a record's own counters contradict its output (output_invariants FAILs it)
    without its per-step lists: the acceptance tests read those lists as the engine's account of
    each step, and an account that does not add up is a finding, not input to a statistic."""
    return [{**r, **dict.fromkeys(PER_STEP_FIELDS, [])} if counter_problems(r) else r for r in records]


__all__ = ["output_invariants", "output_limits", "tokenizer_name", "without_contradicting_counters"]
