"""Sampling settings as an audit axis: parsing `--sampling` values, their labels, and which real
bug classes a setting cannot show.

A correctness verdict holds for the setting it was tested at. Several bugs that shipped in real
engines change the output only when warping does something: at T = 1 without top-k or top-p the
warped and raw distributions are the same, so a bug that mixes them up is invisible there; at
greedy decoding every randomised rule collapses to argmax. `blind_spots(spec)` lists the classes
a setting cannot see, from the definitions below (each was checked end to end, docs/selftest.md).
Torch-free, so the CLI checks a bad `--sampling` in a fraction of a second.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from specaudit.decoding._spec import SamplingSpec
from specaudit.errors import InputError

# Keys a setting may name, as the user writes them -> SamplingSpec field.
_KEYS = {"t": "temperature", "temperature": "temperature", "top_k": "top_k", "top-k": "top_k", "top_p": "top_p", "top-p": "top_p"}
_EXAMPLES = "greedy, t=0.7,top_p=0.9 or t=1,top_k=50"


def parse_setting(text: str) -> SamplingSpec:
    """One `--sampling` value: `greedy`, or comma-separated key=value pairs of t (temperature),
    top_k and top_p (unset ones are off: t=1, no top-k, no top-p)."""
    words = str(text).strip()
    if words.lower() == "greedy":
        return SamplingSpec(temperature=0.0)
    values: dict[str, float | int] = {}
    for part in (p.strip() for p in words.split(",")):
        key, sep, value = part.partition("=")
        field = _KEYS.get(key.strip().lower())
        if not sep or field is None:
            raise InputError(f"--sampling {text!r}: {part!r} is not key=value with key t, top_k or top_p; write e.g. {_EXAMPLES}")
        if field in values:
            raise InputError(f"--sampling {text!r} sets {field} twice")
        try:
            values[field] = int(value) if field == "top_k" else float(value)
        except ValueError:
            kind = "an integer" if field == "top_k" else "a number"
            raise InputError(f"--sampling {text!r}: {key.strip()} must be {kind}, got {value.strip()!r}") from None
    try:
        return SamplingSpec(**values)
    except InputError as err:
        raise InputError(f"--sampling {text!r}: {err}") from None


def parse_settings(values: Iterable[str] | str) -> list[SamplingSpec]:
    """Several settings (a list, or one string of settings separated by ';'); repeats are an error."""
    texts = [v for v in re.split(r"\s*;\s*", values) if v] if isinstance(values, str) else [str(v) for v in values]
    if not texts:
        raise InputError(f"--sampling names no setting; give one or more of {_EXAMPLES}")
    specs = [parse_setting(t) for t in texts]
    labels = [setting_label(s) for s in specs]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise InputError(f"--sampling repeats the setting {', '.join(repeated)}")
    return specs


def setting_label(spec: SamplingSpec) -> str:
    """The setting as `--sampling` writes it: greedy, t=1, t=0.7,top_p=0.9."""
    if spec.greedy:
        return "greedy"
    parts = [f"t={spec.temperature:g}"]
    if spec.top_k:
        parts.append(f"top_k={spec.top_k}")
    if spec.top_p < 1.0:
        parts.append(f"top_p={spec.top_p:g}")
    return ",".join(parts)


def setting_slug(spec: SamplingSpec) -> str:
    """A folder name for the setting's audit (t0.7_top_p0.9)."""
    return setting_label(spec).replace("=", "").replace(",", "_")


def _warps(spec: SamplingSpec) -> bool:
    return spec.greedy or spec.temperature != 1.0 or _truncates(spec)


def _truncates(spec: SamplingSpec) -> bool:
    return not spec.greedy and (spec.top_k > 0 or spec.top_p < 1.0)


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
        "mlx-swift-lm PR #459; DESIGN.md's mutant table",
        "shared_uniform, power_ratio, q_floor, deterministic_accept",
        lambda spec: not spec.greedy,
        "greedy decoding (p and q are one-hot, so every such rule accepts exactly the argmax)",
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
