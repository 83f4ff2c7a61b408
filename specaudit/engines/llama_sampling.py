"""llama-server's sampling fields: the chain set explicitly on every request, none left to the server.

llama-server fills every sampling field a request leaves out from its own defaults (llama.cpp's
common_params_sampling: top_k 40, top_p 0.95, min_p 0.05, temperature 0.8, temperature last in
the chain), on its native `/completion` and its OpenAI `/v1/completions` alike. So both engines
that talk to it (`--engines llama-server` and `--engines endpoint` on a llama-server URL) send
the whole chain: `samplers: [temperature, top_k, top_p]` (temperature first, as transformers and
specaudit apply it), then llama.cpp's `dist`; every other stage neutral (min_p 0, typical_p 1,
penalties off, DRY off, XTC off, top-n-sigma off, mirostat off, dynamic temperature off); the
request features in llama-server's own field names.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from specaudit.decoding._grammar_source import grammar_format
from specaudit.errors import InputError

if TYPE_CHECKING:
    from specaudit.config import RunConfig
    from specaudit.decoding import SamplingSpec

SAMPLER_ORDER = ["temperature", "top_k", "top_p"]
NEUTRAL_SAMPLING: dict[str, Any] = {
    "min_p": 0.0,
    "typical_p": 1.0,
    "repeat_penalty": 1.0,
    "repeat_last_n": 0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "dry_multiplier": 0.0,
    "xtc_probability": 0.0,
    "top_n_sigma": -1.0,
    "mirostat": 0,
    "dynatemp_range": 0.0,
}


def sampling_fields(cfg: RunConfig, context: int) -> dict[str, Any]:
    """Every sampling field of one request at the run's setting; `context` is the prompt and
    output length, the penalty window of the reference's whole-sequence scope."""
    return {
        "temperature": cfg.temperature,
        "top_k": cfg.top_k,  # 0: off (llama.cpp's top-k keeps everything for k <= 0)
        "top_p": cfg.top_p,
        "samplers": SAMPLER_ORDER,
        **NEUTRAL_SAMPLING,
        **request_features(cfg.sampling, context),
    }


def request_features(spec: SamplingSpec, context: int) -> dict[str, Any]:
    """The request features in llama-server's fields, with the stages they need in `samplers`:
    `penalties` first and `min_p` after top-p, as specaudit's `warp` orders them; the logit bias
    is always the chain's first stage. llama-server feeds the prompt into its penalty window, so
    the reference's whole-prompt-and-output repetition scope (repeat_last_n 0) is a window of
    `context` tokens; presence and frequency counted over the output alone have no llama.cpp
    equivalent and are refused in one sentence. A grammar goes as `json_schema` (a JSON schema) or
    `grammar` (GBNF)."""
    body: dict[str, Any] = {}
    samplers = list(SAMPLER_ORDER)
    if spec.penalised:
        if not spec.repeat_last_n and (spec.presence_penalty or spec.frequency_penalty):
            raise InputError(
                "llama-server counts presence and frequency penalties over its last repeat_last_n tokens of prompt and output, "
                "not over the output alone; add repeat_last_n=N to the --sampling setting to audit llama.cpp's convention"
            )
        body.update(
            repeat_penalty=spec.repetition_penalty,
            presence_penalty=spec.presence_penalty,
            frequency_penalty=spec.frequency_penalty,
            repeat_last_n=spec.repeat_last_n or context,
        )
        samplers.insert(0, "penalties")
    if spec.min_p > 0.0:
        body["min_p"] = spec.min_p
        samplers.append("min_p")
    if spec.logit_bias:
        body["logit_bias"] = [[token, bias] for token, bias in spec.logit_bias]
    if spec.stop:
        body["stop"] = list(spec.stop)
    if spec.grammar:  # a JSON schema as llama-server's json_schema, GBNF as its grammar
        if grammar_format(spec.grammar) == "json_schema":
            body["json_schema"] = json.loads(spec.grammar)
        else:
            body["grammar"] = spec.grammar
    if samplers != SAMPLER_ORDER:
        body["samplers"] = samplers
    return body


__all__ = ["NEUTRAL_SAMPLING", "SAMPLER_ORDER", "request_features", "sampling_fields"]
