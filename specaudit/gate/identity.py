"""The identity-draft check of a run with `--draft target` (the snapshot's `identity` section).

With the target as its own draft a correct verifier's acceptance is known from its rule
(analysis.identity, stats.identity); acceptance outside that interval is proof of a broken
verifier, so `identity-draft` FAILs naming the engine, the setting and the figures. A snapshot
without the section (any other draft) gets no check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specaudit.contracts import CheckStatus
from specaudit.gate.results import GateCheck, mapping
from specaudit.gate.thresholds import FAIL, PASS, WARN


def identity_checks(snapshot: Mapping[str, Any]) -> list[GateCheck]:
    identity = mapping(snapshot.get("identity"))
    if not identity:
        return []
    status = str(identity.get("status")).upper()
    engines = {name: mapping(entry) for name, entry in mapping(identity.get("engines")).items()}
    verdict = FAIL if status == CheckStatus.FAIL else PASS if status == CheckStatus.PASS else WARN
    return [
        GateCheck(
            "identity-draft",
            "with the target as its own draft, acceptance is what the engine's rule gives a correct verifier",
            verdict,
            f"at {identity.get('sampling')}: {identity.get('message')}",
            {
                name: {key: entry.get(key) for key in ("rule", "accepted", "tested", "acceptance", "expected", "interval", "pvalue")}
                for name, entry in engines.items()
            },
        )
    ]
