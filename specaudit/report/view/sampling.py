"""Which sampling setting the audit tested and which real bug classes that setting cannot show
(specaudit.decoding.settings): the banner's blind-spot sentence and the report's small table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specaudit.contracts.snapshot import RunConfigBlock
from specaudit.decoding.settings import BUG_CLASSES, FEATURE_CLASSES, blind_spot_sentence, setting_label
from specaudit.errors import InputError
from specaudit.report.view.format import finite

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import Snapshot
    from specaudit.decoding import SamplingSpec


def snapshot_setting(snapshot: Snapshot) -> SamplingSpec | None:
    """The SamplingSpec of the snapshot's run, or None where its config does not say (an old or hand-made snapshot)."""
    from specaudit.decoding import SamplingSpec

    config = snapshot.run.config or RunConfigBlock()
    temperature, top_k, top_p = config.temperature, config.top_k, config.top_p
    if not finite(temperature):
        return None
    try:
        base = SamplingSpec(
            temperature=float(temperature),
            top_k=int(top_k) if finite(top_k) else 0,
            top_p=float(top_p) if finite(top_p) else 1.0,
        )
        # the request features the run set, so the banner names the whole setting (older configs have none)
        features = config.request_features()
        return SamplingSpec.from_dict({**base.to_dict(), **features}) if features else base
    except (InputError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class SamplingView:
    """The setting tested, the banner's blind-spot sentence (None where it has none) and one row per
    bug class; rows stay mappings because the template reads row["class"]."""

    ran: bool
    label: str | None = None
    sentence: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)


def sampling_view(snapshot: Snapshot) -> SamplingView:
    """One row per bug class, the request-feature classes after the others, whether this setting
    can show it; not run where the run's config does not say its setting."""
    spec = snapshot_setting(snapshot)
    if spec is None:
        return SamplingView(ran=False)
    rows = [
        {"class": c.name, "example": c.example, "reports": c.reports, "visible": c.visible(spec), "blind_when": c.blind_when}
        for c in (*BUG_CLASSES, *FEATURE_CLASSES)
    ]
    return SamplingView(ran=True, label=setting_label(spec), sentence=blind_spot_sentence(spec), rows=rows)
