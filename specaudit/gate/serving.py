"""Checks of a serving engine that no token test sees: its logprobs and its acceptance under load.

Both read sections that only runs against servers have (`logprob_parity` where a server returned
logprobs, `acceptance_stability` for runs at concurrency levels); a snapshot without them gets no
check, since the audit never asked the question.

- `logprob-parity` FAILs when the speculative server's logprobs are not the target's (the spec-OFF
  server's for the same prefix): whatever consumes them (evaluation harnesses, confidence filters)
  is given wrong numbers, even where the tokens are right (llama.cpp #27972).
- `acceptance-stability` WARNs when acceptance collapses under load or stops during the run: the
  output stays right, the speed-up is lost (TensorRT-LLM PR #16888, llama.cpp PR #27692).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specaudit.contracts import CheckStatus, DisparityStatus
from specaudit.gate.results import GateCheck, mapping
from specaudit.gate.thresholds import FAIL, PASS, WARN


def serving_checks(snapshot: Mapping[str, Any]) -> list[GateCheck]:
    checks = []
    parity = mapping(snapshot.get("logprob_parity"))
    if parity:
        failed = str(parity.get("status")).upper() == CheckStatus.FAIL
        checks.append(
            GateCheck(
                "logprob-parity",
                "the server's logprobs are the target's",
                FAIL if failed else PASS,
                str(parity.get("message") or f"{parity.get('differing', 0)} of {parity.get('positions', 0)} positions differ"),
                {key: parity.get(key) for key in ("positions", "differing", "zero_logprob", "max_abs_diff", "threshold")},
            )
        )
    stability = mapping(snapshot.get("acceptance_stability"))
    if stability:
        flagged = str(stability.get("status")).upper() == DisparityStatus.FLAG
        findings = [mapping(f) for f in stability.get("findings") or []]
        if findings:
            message = "; ".join(str(f.get("message")) for f in findings)
        else:  # not shown is not "holds": say how far down each level's interval reaches
            ratios = [
                f"level {level}: {r['estimate']:.2f}x [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
                for level, entry in mapping(stability.get("levels")).items()
                if (r := mapping(mapping(entry).get("ratio_to_lowest"))).get("ci_low") is not None
            ]
            message = "no collapse under load and no stop during the run shown" + (
                f" (accepted drafts per token against the lowest level: {'; '.join(ratios)})" if ratios else ""
            )
        checks.append(
            GateCheck(
                "acceptance-stability",
                "speculation keeps working under load and over the run",
                WARN if flagged else PASS,
                message,
                {"levels": stability.get("levels"), "findings": findings},
            )
        )
    return checks
