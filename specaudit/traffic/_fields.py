"""One log line -> one flat request row: what the analysis needs, and no prompt text unless asked.

The line's shape (the proxy writes it; other logs are mapped onto it with a column map):

    {"time": ISO-8601 arrival, "request": {OpenAI completion or chat body}, "response": {the server's
     body, or the merged stream}, "latency_s": float, "ttft_s": float?, "labels": {str: str}?,
     "in_flight": int?, "status": int?}

Acceptance is read by `engines.request_acceptance` (llama-server `timings.draft_n`, vLLM
`metrics.speculative_decoding`, SGLang `meta_info`); token counts from `usage` (OpenAI), else
llama-server's `timings.prompt_n` / `predicted_n` or `tokens_evaluated` / `tokens_predicted`, else
SGLang's `meta_info.prompt_tokens` / `completion_tokens`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from specaudit.engines.request_acceptance import request_acceptance
from specaudit.errors import InputError

# Fields of the line shape that a column map may point elsewhere (dotted paths into the line).
MAPPABLE = ("time", "request", "response", "latency_s", "ttft_s", "labels", "in_flight", "status", "proposed", "accepted")
# The flat row, in order (the store's columns besides digest and the derived ones).
ROW_FIELDS = (
    "time",
    "prompt_tokens",
    "output_tokens",
    "proposed",
    "accepted",
    "latency_s",
    "ttft_s",
    "temperature",
    "in_flight",
    "status",
    "source",
    "labels",
    "text",
)


# Labels that declare a request's language (the log's word beats the identifier's guess).
LANGUAGE_LABELS = ("language", "lang")


def canonical_labels(labels: Mapping[str, Any]) -> tuple[str, str | None]:
    """(the labels as stored: values as strings, keys sorted, JSON; the language they declare, if any)."""
    flat = {str(k): str(v) for k, v in labels.items()}
    declared = next((flat[k] for k in LANGUAGE_LABELS if k in flat), None)
    return json.dumps(flat, sort_keys=True, ensure_ascii=False), declared


def parse_column_map(items: list[str] | None) -> dict[str, str]:
    """{field: dotted path} from FIELD=PATH strings, e.g. latency_s=timing.total."""
    mapping: dict[str, str] = {}
    for item in items or ():
        for part in item.split(","):
            field, sep, path = part.partition("=")
            field, path = field.strip(), path.strip()
            if not sep or not path:
                raise InputError(f"--column-map {part!r}: write FIELD=PATH, e.g. latency_s=timing.total")
            if field not in MAPPABLE:
                raise InputError(f"--column-map {part!r}: unknown field '{field}'; fields are {', '.join(MAPPABLE)}")
            mapping[field] = path
    return mapping


def _at(obj: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _number(value: Any, where: str, *, integer: bool = False) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InputError(f"{where} is {value!r}, not a number >= 0")
    if integer:
        if value != int(value):
            raise InputError(f"{where} is {value!r}, not a whole number")
        return int(value)
    return float(value)


def prompt_text(request: Mapping[str, Any]) -> str:
    """The prompt's text: `prompt` (a string, or the first of a list), else the chat messages' text joined."""
    prompt = request.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return prompt[0]
    parts = []
    for message in request.get("messages") or ():
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
            parts.extend(p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return "\n".join(parts)


def _tokens(response: Mapping[str, Any]) -> tuple[Any, Any]:
    usage = response.get("usage")
    if isinstance(usage, Mapping) and "completion_tokens" in usage:
        return usage.get("prompt_tokens"), usage.get("completion_tokens")
    timings = response.get("timings")
    if isinstance(timings, Mapping) and "predicted_n" in timings:
        return timings.get("prompt_n"), timings.get("predicted_n")
    if "tokens_predicted" in response:
        return response.get("tokens_evaluated"), response.get("tokens_predicted")
    meta = response.get("meta_info")
    if isinstance(meta, Mapping) and "completion_tokens" in meta:
        return meta.get("prompt_tokens"), meta.get("completion_tokens")
    return None, None


def _time(value: Any, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)  # Unix seconds
    if not isinstance(value, str):
        raise InputError(f"{where}: 'time' is {value!r}; write an ISO-8601 time such as 2026-01-31T12:00:00Z")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"{where}: 'time' {value!r} is not an ISO-8601 time such as 2026-01-31T12:00:00Z") from None
    if parsed.tzinfo is None:
        raise InputError(f"{where}: 'time' {value!r} has no time zone; write it in UTC, e.g. {value}Z")
    return parsed.timestamp()


def request_row(line: Mapping[str, Any], where: str, column_map: Mapping[str, str]) -> tuple:
    """The flat row (ROW_FIELDS order) of one log line; `where` is "file:line" for error messages. The prompt's
    text is in it for the language identifier; the store drops it unless asked to keep it."""
    get = (lambda name: _at(line, column_map[name]) if name in column_map else line.get(name)) if column_map else line.get
    request = get("request") or {}
    response = get("response") or {}
    if not isinstance(request, Mapping) or not isinstance(response, Mapping):
        raise InputError(f"{where}: 'request' and 'response' must be JSON objects (the request body and the server's answer)")
    if get("time") is None:
        raise InputError(f"{where} has no 'time' (the request's arrival, ISO-8601)")
    latency = _number(get("latency_s"), f"{where}: latency_s")
    if latency is None:
        raise InputError(f"{where} has no 'latency_s' (seconds from request to the last byte of the answer)")
    try:
        found = request_acceptance(response)
    except InputError as err:
        raise InputError(f"{where}: {err}") from None
    proposed, accepted = (found.proposed, found.accepted) if found is not None else (None, None)
    if "proposed" in column_map:
        proposed = _number(get("proposed"), f"{where}: proposed", integer=True)
        accepted = _number(get("accepted"), f"{where}: accepted", integer=True)
    prompt_n, output_n = _tokens(response)
    labels = get("labels") or {}
    if not isinstance(labels, Mapping):
        raise InputError(f"{where}: 'labels' is {type(labels).__name__}, not an object of names to values")
    temperature = request.get("temperature", 1.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        temperature = 1.0  # the OpenAI default where the body says nothing usable
    status = get("status")
    return (
        _time(get("time"), where),
        _number(prompt_n, f"{where}: prompt tokens", integer=True),
        _number(output_n, f"{where}: completion tokens", integer=True),
        proposed,
        accepted,
        latency,
        _number(get("ttft_s"), f"{where}: ttft_s"),
        float(temperature),
        _number(get("in_flight"), f"{where}: in_flight", integer=True),
        int(status) if isinstance(status, (int, float)) and not isinstance(status, bool) else 200,
        found.source if found is not None else "",
        {str(k): str(v) for k, v in labels.items()},
        prompt_text(request),
    )
