"""Sampling settings as an audit axis: parsing `--sampling` values, their labels, and which real
bug classes a setting cannot show.

A correctness verdict holds for the setting it was tested at. Several bugs that shipped in real
engines change the output only when warping does something: at T = 1 without top-k or top-p the
warped and raw distributions are the same, so a bug that mixes them up is invisible there; at
greedy decoding every randomised rule collapses to argmax. `blind_spots(spec)` lists the classes
a setting cannot see, from the definitions below (each was checked end to end, docs/selftest.md);
`FEATURE_CLASSES` are the request features' classes, each visible only where the setting uses
its feature.
Torch-free, so the CLI checks a bad `--sampling` in a fraction of a second.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from specaudit._validation import did_you_mean
from specaudit.decoding._spec import SamplingSpec
from specaudit.errors import InputError

# Keys a setting may name, as the user writes them -> SamplingSpec field.
_KEYS = {
    "t": "temperature",
    "temperature": "temperature",
    "top_k": "top_k",
    "top-k": "top_k",
    "top_p": "top_p",
    "top-p": "top_p",
    "min_p": "min_p",
    "min-p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "repeat_penalty": "repetition_penalty",  # llama.cpp's name for the same multiplicative penalty
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "repeat_last_n": "repeat_last_n",
    "logit_bias": "logit_bias",
    "stop": "stop",
    "grammar": "grammar",
}
_INTEGERS = ("top_k", "repeat_last_n")
_EXAMPLES = "greedy, t=0.7,top_p=0.9, t=1,top_k=50, t=1,repetition_penalty=1.3 or t=1,min_p=0.1"
# Written in place of characters a stop string may hold but a setting's syntax uses.
_ESCAPES = {"\\n": "\n", "\\t": "\t", "\\,": ",", "\\|": "|", "\\;": ";"}


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        pair = text[i : i + 2]
        if pair in _ESCAPES:
            out.append(_ESCAPES[pair])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _escape(text: str) -> str:
    for written, meant in _ESCAPES.items():
        text = text.replace(meant, written)
    return text


def _split(text: str, separator: str) -> list[str]:
    """Split at `separator` where it is not escaped by a backslash."""
    parts, current, i = [], [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if text[i] == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(text[i])
        i += 1
    parts.append("".join(current))
    return parts


def _logit_bias(text: str, value: str) -> tuple[tuple[int, float], ...]:
    pairs = []
    for item in (v.strip() for v in value.split(";") if v.strip()):
        token, sep, bias = item.partition(":")
        try:
            pairs.append((int(token), float(bias)))
        except ValueError:
            raise InputError(
                f"--sampling {text!r}: logit_bias must be ID:BIAS pairs separated by ';' (e.g. 42:-5;7:2.5), got {item!r}"
            ) from None
        if not sep:
            raise InputError(f"--sampling {text!r}: logit_bias must be ID:BIAS pairs separated by ';' (e.g. 42:-5;7:2.5), got {item!r}")
    if not pairs:
        raise InputError(f"--sampling {text!r}: logit_bias names no ID:BIAS pair")
    return tuple(pairs)


def _grammar(text: str, path: str) -> str:
    """The grammar file's text (a JSON schema or GBNF), checked to compile."""
    from specaudit.decoding._grammar_source import compile_grammar

    try:
        grammar = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"--sampling {text!r}: cannot read the grammar file {path!r} ({err.__class__.__name__})") from None
    try:
        compile_grammar(grammar)
    except InputError as err:
        raise InputError(f"--sampling {text!r}: {path}: {err}") from None
    return grammar


def grammar_digest(grammar: str) -> str:
    """A grammar's short name in labels: the first 8 hex digits of its text's sha256."""
    return hashlib.sha256(grammar.encode("utf-8")).hexdigest()[:8]


def parse_setting(text: str) -> SamplingSpec:
    """One `--sampling` value: `greedy`, or comma-separated key=value pairs of t (temperature),
    top_k, top_p, min_p, the penalties (repetition_penalty or llama.cpp's repeat_penalty,
    presence_penalty, frequency_penalty, repeat_last_n), logit_bias=ID:BIAS;ID:BIAS,
    stop=TEXT|TEXT (\\n, \\t, \\, \\| and \\; escape what the syntax uses) and grammar=FILE (a JSON
    schema or GBNF grammar, read and checked here); unset ones are off."""
    words = str(text).strip()
    if words.lower() == "greedy":
        return SamplingSpec(temperature=0.0)
    values: dict[str, object] = {}
    for part in (p.strip() for p in _split(words, ",")):
        if part.lower() == "greedy" and "temperature" not in values:  # greedy with request features
            values["temperature"] = 0.0
            continue
        key, sep, value = part.partition("=")
        field = _KEYS.get(key.strip().lower())
        if not sep or field is None:
            hint = did_you_mean(key.strip().lower(), [*_KEYS, *(() if sep else ("greedy",))])
            if hint:  # a typo: the suggestion is the sentence
                raise InputError(f"--sampling {text!r}: {(key if sep else part).strip()!r} is not a sampling setting{hint}")
            raise InputError(
                f"--sampling {text!r}: {part!r} is not key=value with a key of {', '.join(sorted(set(_KEYS.values())))}; write e.g. {_EXAMPLES}"
            )
        if field in values:
            raise InputError(f"--sampling {text!r} sets {field} twice")
        if field == "logit_bias":
            values[field] = _logit_bias(text, value)
            continue
        if field == "stop":
            values[field] = tuple(_unescape(v) for v in _split(value, "|"))
            continue
        if field == "grammar":
            values[field] = _grammar(text, value.strip())
            continue
        try:
            values[field] = int(value) if field in _INTEGERS else float(value)
        except ValueError:
            kind = "an integer" if field in _INTEGERS else "a number"
            raise InputError(f"--sampling {text!r}: {key.strip()} must be {kind}, got {value.strip()!r}") from None
    try:
        return SamplingSpec(**values)
    except InputError as err:
        raise InputError(f"--sampling {text!r}: {err}") from None


def _settings_in(text: str) -> list[str]:
    """Settings of one string separated by ';'; a piece without '=' that is not `greedy` continues a
    logit_bias list (`t=1,logit_bias=42:-5;7:2`)."""
    texts: list[str] = []
    for piece in (p.strip() for p in _split(text, ";")):
        if not piece:
            continue
        if texts and "=" not in piece and piece.lower() != "greedy":
            texts[-1] += ";" + piece
        else:
            texts.append(piece)
    return texts


def parse_settings(values: Iterable[str] | str) -> list[SamplingSpec]:
    """Several settings (a list, or one string of settings separated by ';'); repeats are an error."""
    texts = _settings_in(values) if isinstance(values, str) else [str(v) for v in values]
    if not texts:
        raise InputError(f"--sampling names no setting; give one or more of {_EXAMPLES}")
    specs = [parse_setting(t) for t in texts]
    labels = [setting_label(s) for s in specs]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise InputError(f"--sampling repeats the setting {', '.join(repeated)}")
    return specs


def setting_label(spec: SamplingSpec) -> str:
    """The setting as `--sampling` writes it: greedy, t=1, t=0.7,top_p=0.9, t=1,min_p=0.1."""
    parts = ["greedy"] if spec.greedy else [f"t={spec.temperature:g}"]
    if spec.top_k and not spec.greedy:
        parts.append(f"top_k={spec.top_k}")
    if spec.top_p < 1.0 and not spec.greedy:
        parts.append(f"top_p={spec.top_p:g}")
    for name, value in spec.features.items():
        if spec.greedy and name == "min_p":
            continue
        if name == "logit_bias":
            parts.append("logit_bias=" + ";".join(f"{token}:{bias:g}" for token, bias in value))
        elif name == "stop":
            parts.append("stop=" + "|".join(_escape(v) for v in value))
        elif name == "grammar":
            parts.append(f"grammar=#{grammar_digest(value)}")
        else:
            parts.append(f"{name}={value:g}")
    return ",".join(parts)


def setting_slug(spec: SamplingSpec) -> str:
    """A folder name for the setting's audit (t0.7_top_p0.9, t1_min_p0.1)."""
    label = setting_label(spec).replace("=", "").replace(",", "_")
    return re.sub(r"[^A-Za-z0-9._-]", "-", label)


def _warps(spec: SamplingSpec) -> bool:
    # penalties, a logit bias and a grammar also make the processed distribution differ from the raw one
    return spec.greedy or spec.temperature != 1.0 or _truncates(spec) or spec.penalised or bool(spec.logit_bias) or bool(spec.grammar)


def _truncates(spec: SamplingSpec) -> bool:
    return not spec.greedy and (spec.top_k > 0 or spec.top_p < 1.0 or spec.min_p > 0.0)


@dataclass(frozen=True)
class BugClass:
    """A class of real bugs, the public reports that show it, and the settings where it changes the output."""

    name: str
    example: str
    reports: str
    mutant: str  # the self-test mutant that carries it (specaudit.selftest)
    visible: Callable[[SamplingSpec], bool]
    blind_when: str  # when `visible` is False, in words

    def to_dict(self, spec: SamplingSpec) -> dict:
        return {
            "class": self.name,
            "reports": self.reports,
            "mutant": self.mutant,
            "visible": self.visible(spec),
            "blind_when": self.blind_when,
        }


BUG_CLASSES: tuple[BugClass, ...] = (
    BugClass(
        "one-sided warping",
        "target probabilities at the default T = 1, top-p = 1 while the draft's are warped",
        "vLLM #9834 / PR #10198",
        "target_default_sampling",
        _warps,
        "T = 1 without top-k or top-p: warped and raw distributions are the same",
    ),
    BugClass(
        "q before truncation",
        "drafts sampled from top-k/top-p-processed logits, q computed from the logits before",
        "transformers #47932 / PR #47961",
        "draft_q_before_truncation",
        _truncates,
        "no top-k and no top-p (q is then the same before and after), or greedy",
    ),
    BugClass(
        "greedy draft, soft q",
        "the drafter decodes greedily while its soft probabilities enter the ratio",
        "transformers #32867 / PR #33534",
        "greedy_draft",
        lambda spec: not spec.greedy,
        "greedy decoding (a greedy draft is then the right draft)",
    ),
    BugClass(
        "verification silently greedy",
        "verification takes the argmax whatever the temperature and top-p",
        "SGLang PR #31214",
        "greedy_verification",
        lambda spec: not spec.greedy,
        "greedy decoding (argmax is then the right rule)",
    ),
    BugClass(
        "randomised acceptance rule",
        "one uniform per step, (p/q)^0.8, q floored, accept iff p >= q",
        "mlx-swift-lm PR #459; the self-test's mutants (docs/selftest.md)",
        "shared_uniform, power_ratio, q_floor, deterministic_accept",
        lambda spec: not spec.greedy,
        "greedy decoding (p and q are one-hot, so every such rule accepts exactly the argmax)",
    ),
)


# The request-feature classes (issue 38): each changes the output only where the setting uses its
# feature, so they are listed in the report's table beside the classes above but left out of the
# banner's sentence (a deployment that never sends penalties cannot ship a penalty bug to its
# users). Their mutants are the self-test's served ones (specaudit.testing.server_mutants).
FEATURE_CLASSES: tuple[BugClass, ...] = (
    BugClass(
        "penalties on the speculative path",
        "penalties counted on the last token of an accepted run only, or dropped when speculating",
        "SGLang #33643; TensorRT-LLM #17701",
        "penalties_last_token, penalties_off_speculating",
        lambda spec: spec.penalised,
        "no repetition, presence or frequency penalty in the setting",
    ),
    BugClass(
        "min-p and logit bias on the bonus token only",
        "processors judged argmax-invariant skipped for the verified tokens",
        "vLLM #42744, #38202",
        "min_p_bias_bonus_only",
        lambda spec: bool(spec.logit_bias) or (spec.min_p > 0.0 and not spec.greedy),
        "no logit bias and no min-p (or min-p at greedy, where it changes nothing)",
    ),
    BugClass(
        "tokens after a stop string",
        "the text cut at the stop, the token ids and logprobs after it returned",
        "vLLM #47616; SGLang #31599",
        "post_stop_tokens",
        lambda spec: bool(spec.stop),
        "no stop string in the setting",
    ),
    BugClass(
        "draft tokens past the grammar",
        "drafted tokens verified without the grammar's mask (a bitmask out of step with the draft)",
        "vLLM #31858, #34650; SGLang #9187",
        "draft_skips_grammar",
        lambda spec: bool(spec.grammar),
        "no grammar in the setting",
    ),
    BugClass(
        "seed ignored when speculating",
        "every request seeded alike, so samples of one prompt are copies",
        "TensorRT-LLM #19487, #17599",
        "seed_ignored",
        lambda spec: not spec.greedy,
        "greedy decoding (the seed then changes nothing)",
    ),
    BugClass(
        "logprobs of a step's later tokens",
        "logprobs right for the first token of a step only",
        "llama.cpp #27196",
        "logprobs_first_of_step",
        lambda spec: not spec.greedy,
        "greedy decoding (processed logprobs are then 0 for every emitted token)",
    ),
)


def blind_spots(spec: SamplingSpec) -> list[BugClass]:
    """The bug classes this setting cannot show: a run carrying one is distributed exactly as a correct run."""
    return [c for c in BUG_CLASSES if not c.visible(spec)]


def blind_spot_sentence(spec: SamplingSpec) -> str | None:
    """One sentence for a report banner: what a pass at this setting does not cover; None when nothing."""
    blind = blind_spots(spec)
    if not blind:
        return None
    names = "; ".join(f"{c.name} ({c.reports})" for c in blind)
    return (
        f"Sampling: tested at {setting_label(spec)} only, where these bug classes cannot change the output, so they were "
        f"not tested: {names}. Audit the settings you serve with (--sampling)."
    )
