"""The report's glossary: every term it uses, named once and explained once."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markupsafe import Markup

    from specaudit.contracts.snapshot import RunSection

GLOSSARY = {
    "acceptance": ("acceptance rate", "the share of drafted tokens the target accepts"),
    "speedup": (
        "speed-up",
        ("vanilla time per token divided by speculative time per token, paired per prompt; below 1× speculation is slower"),
    ),
    "reference": ("reference group", "the group every other group of a dimension is compared with"),
    "ratio": ("ratio to reference", "a group's value divided by the reference group's value"),
    "band": ("tolerance band", "the range of ratios that counts as parity (by default 0.8–1.25, the four-fifths convention)"),
    "ci": ("95% interval", "a bootstrap confidence interval that resamples whole prompts"),
    "statuses": (
        "FLAG / WITHIN / INCONCLUSIVE / INSUFFICIENT",
        (
            "the ratio's interval lies wholly outside the band / wholly "
            "inside it / across a band edge; or the design cannot detect a ratio at the band's edges"
        ),
    ),
    "mdr": ("detectable ratio", "the smallest drop or rise of the ratio the test finds with 80% power at these group sizes"),
    "pit": (
        "PIT",
        (
            "probability integral transform: where each emitted token falls in the target's cumulative distribution; "
            "uniform when the sampler follows the target"
        ),
    ),
    "pit_bound": (
        "PIT distortion bound",
        (
            "a 95% upper bound d on the largest gap between the PIT's cumulative distribution and the uniform one "
            "(DKW inequality): every event on the PIT scale happens within d of its rate under a correct sampler; "
            "it does not bound the distance between output distributions, nor any one prompt or group"
        ),
    ),
    "tv": (
        "TV",
        (
            "total-variation distance: the largest difference in probability two distributions give any set of outputs "
            "(0 identical, 1 disjoint)"
        ),
    ),
    "kl": ("KL", "Kullback–Leibler divergence, another distance between distributions"),
    "delta": ("δ", "the equivalence margin: TV below δ counts as equivalent"),
    "alpha": ("α", "the significance level, the accepted rate of false alarms"),
    "holm": ("Holm", "a correction of p-values for running several tests at once (family-wise error at α)"),
    "beta": ("β", "the theoretical acceptance probability, Σ min(p, q) over the vocabulary of target p and draft q"),
    "beta_bar": (
        "β̄ (mean acceptance)",
        (
            "β averaged over drafted positions: what rejection sampling accepts per position from this draft for this "
            "target, the same on any hardware (α is never used for it: α is the significance level)"
        ),
    ),
    "tau": ("τ", "tokens emitted per verification step"),
    "k": ("k", "draft tokens proposed per verification step"),
    "c": ("c", "the cost of one draft step relative to one target step"),
    "screen": (
        "screen",
        (
            "target samples of every prompt with the acceptance expected along them (Σ min(p, q) per position), so "
            "acceptance per group needs no speculative run of every prompt; the engines run on a subset"
        ),
    ),
    "fieller": ("Fieller", "a confidence interval for a ratio of two means (here: a group's value over the reference's)"),
    "dimension": ("dimension", "a prompt attribute that splits prompts into groups (language, dialect, task, context length, ...)"),
    "rank_biserial": ("rank-biserial", "an effect size from −1 to 1: how often one group's prompts beat the other's"),
    "control": ("control", "plain (vanilla) decoding, run through the same tests: if it fails them, the audit itself is suspect"),
    "two_sample": (
        "two-sample test",
        ("compares speculative with vanilla outputs only (black-box), permuting engine labels within each prompt"),
    ),
}


class Terms:
    """A term's short explanation in brackets at its first use in the page (so it also prints),
    a link to the glossary afterwards. Called from the template in reading order."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, key: str, shown: str | None = None) -> Markup:
        from markupsafe import Markup, escape

        name, meaning = GLOSSARY[key]
        text = escape(shown or name)
        if key in self.used:
            return Markup(f'<a class="term" href="#g-{key}">{text}</a>')
        self.used.add(key)
        return Markup(f'<dfn>{text}</dfn> <span class="gloss">({escape(meaning)})</span>')


def glossary_for(text: str) -> list[tuple[str, str]]:
    """(term, meaning) of every glossary term the text uses (its name, or for a name with a
    bracket, the part before it), in glossary order; α and β̄ always, as they are easily confused."""
    rows = []
    spelled = {"pit_bound": "distortion of the PIT"}  # how the text words it
    for key, name, meaning in glossary_rows():
        short = spelled.get(key) or name.split(" (")[0].split(" / ")[0]
        if key in ("alpha", "beta_bar") or short in text:
            rows.append((name, meaning))
    return rows


def glossary_rows() -> list[tuple[str, str, str]]:
    return [(key, name, meaning) for key, (name, meaning) in sorted(GLOSSARY.items(), key=lambda kv: kv[1][0].lower())]


def group_names(run: RunSection) -> list[tuple[str, str, str]]:
    """(dimension, group code, readable name) for every group the prompt set names (its manifest's
    `labels:`), in the set's order: codes like `sae` or `naija` read as their varieties."""
    dimensions = (run.prompt_set.dimensions if run.prompt_set is not None else None) or {}
    rows = []
    for dimension, spec in dimensions.items():
        rows += [(dimension, group, spec.labels[group]) for group in spec.groups if group in spec.labels]
    return rows
