"""Output invariants: what every record of every engine must satisfy, whatever its distribution.

One implementation for all engines (in-process and servers alike): the endpoint executor checks
token ids against the vocabulary with it as answers arrive, and analysis
(specaudit.analysis.invariants) runs every check on every record. A violation is a dict
{check, position, problem}: the check's name, the output position it concerns (None where it
concerns the whole record) and one clause saying what is wrong. Pure: the caller supplies the
target's vocabulary size, end-of-sequence ids and decoder (`OutputLimits`).

The checks (CHECKS):

- `length`: at most max_new_tokens output tokens.
- `vocabulary`: every output id in [0, vocab_size).
- `after-eos`: no token after the first end-of-sequence id.
- `after-stop`: no token after the one that completes the first stop string of the record's
  sampling (`sampling.stop`); the completing token may carry text past the stop string.
- `stop-reason`: a record that says it ended on a stop string (finish_reason "stop") holds one in
  its output ids (an engine that drops the stop's token yet reports the stop).
- `grammar`: under a grammar (`sampling.grammar`), every token allowed where it stands, and an
  output that ended (end-of-sequence or a stop) a complete sentence of the grammar.
- `text`: the record's text is its ids detokenised by the target's tokenizer, up to the ways
  engines legitimately differ (`text_matches`).
- `counters`: the engine's own counts consistent: accepted <= proposed, per-step lists summing
  to the totals, no step accepting more than it proposed, new tokens = accepted + steps (with the
  cuts the docstring of `counter_problems` lists), beta in [0, 1], per-token lists the right length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from specaudit.contracts.run import SCREEN_ENGINE

CHECKS = ("length", "vocabulary", "after-eos", "after-stop", "stop-reason", "grammar", "text", "counters")
REPLACEMENT = "\ufffd"  # what a decoder writes for the bytes of a character cut in two


@dataclass(frozen=True)
class OutputLimits:
    """What the checks compare records with; a check whose input is None is not run (`skipped`)."""

    max_new_tokens: int | None = None
    vocab_size: int | None = None
    eos_ids: frozenset[int] = frozenset()
    # ids -> text, as the target's tokenizer decodes them: (skip_special_tokens, clean_up_spaces) -> str
    decode: Callable[[list[int], bool, bool], str] | None = None
    # (grammar text, ids, ended) -> why the ids break the grammar, or None (decoding.grammar)
    grammar_error: Callable[[str, list[int], bool], str | None] | None = None
    skipped: dict[str, str] = field(default_factory=dict)  # check -> why it could not run


def violation(check: str, position: int | None, problem: str) -> dict:
    return {"check": check, "position": position, "problem": problem}


def vocabulary_violations(ids: Sequence[int], vocab_size: int) -> list[dict]:
    """Positions whose token id lies outside [0, vocab_size): no correct engine emits one."""
    return [
        violation("vocabulary", position, f"token id {token}, outside the vocabulary [0, {vocab_size})")
        for position, token in enumerate(ids)
        if not 0 <= token < vocab_size
    ]


def _after_eos(ids: Sequence[int], eos_ids: frozenset[int]) -> list[dict]:
    first = next((i for i, token in enumerate(ids) if token in eos_ids), None)
    if first is None or first == len(ids) - 1:
        return []
    return [
        violation(
            "after-eos", first + 1, f"{len(ids) - first - 1} token(s) follow the end-of-sequence token {ids[first]} at position {first}"
        )
    ]


def _stop_strings(record: dict) -> list[str]:
    stop = (record.get("sampling") or {}).get("stop") or []
    return [stop] if isinstance(stop, str) else [s for s in stop if isinstance(s, str) and s]


def _after_stop(ids: list[int], stops: list[str], decode: Callable[[list[int], bool, bool], str]) -> list[dict]:
    """The token that completes the first stop string must be the last one."""
    if not stops or not any(s in decode(ids, True, False) for s in stops):
        return []
    for end in range(1, len(ids) + 1):
        text = decode(ids[:end], True, False)
        found = [s for s in stops if s in text]
        if found:
            if end == len(ids):
                return []
            return [
                violation(
                    "after-stop", end, f"{len(ids) - end} token(s) follow the stop string {found[0]!r}, completed at position {end - 1}"
                )
            ]
    return []


def _stop_reason(ids: list[int], stops: list[str], finish_reason: object, decode: Callable[[list[int], bool, bool], str]) -> list[dict]:
    """A record ended "stop" must hold a stop string in its ids' text."""
    if finish_reason != "stop" or not stops or any(s in decode(ids, True, False) for s in stops):
        return []
    listed = ", ".join(repr(s) for s in stops)
    return [violation("stop-reason", None, f"finish_reason is stop but no stop string ({listed}) is in the output's ids")]


def _candidates(ids: list[int], decode: Callable[[list[int], bool, bool], str]) -> list[str]:
    """The texts a correct engine may return for `ids`: with or without special tokens, with or
    without the tokenizer's space clean-up."""
    return list(dict.fromkeys(decode(ids, skip, clean) for skip in (True, False) for clean in (False, True)))


def _normal(text: str) -> str:
    # A decoder drops or keeps the first piece's leading space (SentencePiece's "▁"; a server decodes
    # with the prompt as context and keeps it), and an engine may hold back a character's bytes that
    # the budget cut in two: neither is a different output.
    return text.lstrip(" ").rstrip(REPLACEMENT)


def text_matches(text: str, ids: list[int], decode: Callable[[list[int], bool, bool], str], stops: Sequence[str] = ()) -> bool:
    """Whether `text` is `ids` detokenised: equal to one of the decoder's readings (`_candidates`)
    up to a leading space and a trailing cut character (`_normal`); with stop strings, also the
    reading cut just before or just after the first stop string (servers leave it out or keep it)."""
    wanted = _normal(text)
    for candidate in _candidates(ids, decode):
        if _normal(candidate) == wanted:
            return True
        for stop in stops:
            at = candidate.find(stop)
            if at >= 0 and wanted in (_normal(candidate[:at]), _normal(candidate[: at + len(stop)])):
                return True
    return False


def _first_text_difference(text: str, ids: list[int], decode: Callable[[list[int], bool, bool], str]) -> int:
    """The first output position whose decoded prefix is no longer a prefix of `text`."""
    wanted = _normal(text)
    for end in range(1, len(ids) + 1):
        prefix = _normal(decode(ids[:end], True, False))
        if not wanted.startswith(prefix):
            return end - 1
    return len(ids)


def counter_problems(record: dict) -> list[str]:
    """The engine's own counts against each other and against its output; [] where all hold.

    new tokens == accepted + steps, except when an end-of-sequence token arrived inside an
    accepted draft (the tokens drafted after it are cut, so new tokens may then be fewer), and one
    fewer when the length budget ended inside a step's accepted drafts (an engine that drafts k
    tokens whatever the budget left, llama.cpp: that step's correction token is cut). An endpoint
    sees no steps (steps = 0): its counts are not observed, not inconsistent.
    """
    problems: list[str] = []
    if any(record.get(name) is None for name in ("accepted", "proposed", "steps", "output_token_ids")):
        return problems  # counts the record does not carry are not observed
    if record["accepted"] > record["proposed"]:
        problems.append(f"accepted {record['accepted']} > proposed {record['proposed']}")
    new_tokens = len(record["output_token_ids"])
    expected = record["accepted"] + record["steps"]
    observed = record["steps"] > 0 or not record.get("backend")
    cut = record.get("finish_reason") == "eos" or (record.get("finish_reason") == "length" and new_tokens == expected - 1)
    if observed and (new_tokens > expected or (new_tokens < expected and not cut)):
        problems.append(f"{new_tokens} new tokens but accepted + steps = {expected}")
    for step in record.get("beta", []):
        if any(not (-1e-6 <= b <= 1 + 1e-6) for b in step):
            problems.append(f"beta outside [0, 1]: {step}")
            break
    # Backends that see only run-level counters (vLLM, endpoints) leave the per-step lists empty.
    per_step = bool(record.get("accepted_per_step") or record.get("proposed_per_step"))
    if per_step and sum(record.get("accepted_per_step", [])) != record["accepted"]:
        problems.append("accepted_per_step does not sum to accepted")
    if per_step and sum(record.get("proposed_per_step", [])) != record["proposed"]:
        problems.append("proposed_per_step does not sum to proposed")
    if any(a > p for a, p in zip(record.get("accepted_per_step", []), record.get("proposed_per_step", []))):
        problems.append("a step accepted more tokens than it proposed")
    if record.get("step_pit") and len(record["step_pit"]) != new_tokens:
        problems.append(f"step_pit has {len(record['step_pit'])} entries for {new_tokens} new tokens")
    # a tree step has one drafted token per depth it reached only (past a rejection: a subtree)
    entries = record.get("proposed_per_step")
    if record.get("tree") is not None and entries is not None:
        entries = [min(a + 1, d) for a, d in zip(record.get("accepted_per_step") or [], entries)]
    if record.get("accept_prob") and [len(s) for s in record["accept_prob"]] != entries:
        problems.append("accept_prob does not have one entry per drafted token" + (" reached" if record.get("tree") is not None else ""))
    return problems


def check_invariants(records: Iterable[dict]) -> list[str]:
    """The counter problems of `records`, each as "KEY: problem"; an empty list means all hold."""
    return [f"{record['key']}: {problem}" for record in records for problem in counter_problems(record)]


def record_violations(record: dict, limits: OutputLimits) -> list[dict]:
    """Every invariant `record` breaks (see the module docstring), in the order of CHECKS."""
    ids = list(record.get("output_token_ids") or [])
    found: list[dict] = []
    if limits.max_new_tokens is not None and len(ids) > limits.max_new_tokens:
        found.append(violation("length", limits.max_new_tokens, f"{len(ids)} output tokens for max_new_tokens {limits.max_new_tokens}"))
    if limits.vocab_size is not None:
        found += vocabulary_violations(ids, limits.vocab_size)
    if limits.eos_ids:
        found += _after_eos(ids, limits.eos_ids)
    in_vocabulary = limits.vocab_size is None or all(0 <= t < limits.vocab_size for t in ids)
    # Ids a server gave as text, tokenised here, say nothing about its text: they were made from it.
    own_ids = record.get("token_ids_source") in (None, "server")
    if limits.decode is not None and in_vocabulary:
        stops = _stop_strings(record)
        found += _after_stop(ids, stops, limits.decode)
        found += _stop_reason(ids, stops, record.get("finish_reason"), limits.decode)
        grammar = (record.get("sampling") or {}).get("grammar")
        if grammar and limits.grammar_error is not None:
            problem = limits.grammar_error(grammar, ids, record.get("finish_reason") in ("eos", "stop"))
            found += [violation("grammar", None, problem)] if problem else []
        text = record.get("text")
        if own_ids and isinstance(text, str) and not text_matches(text, ids, limits.decode, stops):
            position = _first_text_difference(text, ids, limits.decode)
            shown = limits.decode(ids, True, False)
            found.append(
                violation(
                    "text",
                    position,
                    f"the text {_clip(text)} is not the ids detokenised ({_clip(shown)}), first apart at position {position}",
                )
            )
    if record.get("engine") != SCREEN_ENGINE:  # the screen's counts are expectations along target samples
        found += [violation("counters", None, problem) for problem in counter_problems(record)]
    return found


def _clip(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


__all__ = [
    "CHECKS",
    "OutputLimits",
    "check_invariants",
    "counter_problems",
    "record_violations",
    "text_matches",
    "violation",
    "vocabulary_violations",
]
