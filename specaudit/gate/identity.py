"""The identity-draft check of a run with `--draft target` (the snapshot's `identity` section).

With the target as its own draft a correct verifier's acceptance is known from its rule
(analysis.identity, stats.identity); acceptance outside that interval is proof of a broken
verifier, so `identity-draft` FAILs naming the engine, the setting and the figures. A snapshot
without the section (any other draft) gets no check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specaudit.contracts import CheckStatus
from specaudit.gate.results import GateCheck
from specaudit.gate.thresholds import FAIL, PASS, WARN

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import Snapshot

_SHOWN = ("rule", "accepted", "tested", "acceptance", "expected", "interval", "pvalue")


def identity_checks(snapshot: Snapshot) -> list[GateCheck]:
    identity = snapshot.identity
    if identity is None:
        return []
    verdict = FAIL if identity.status == CheckStatus.FAIL else PASS if identity.status == CheckStatus.PASS else WARN
    return [
        GateCheck(
            "identity-draft",
            "with the target as its own draft, acceptance is what the engine's rule gives a correct verifier",
            verdict,
            f"at {identity.sampling}: {identity.message}",
            {name: {key: getattr(entry, key) for key in _SHOWN} for name, entry in identity.engines.items()},
        )
    ]
