"""One log line -> one flat request row: what the analysis needs, and no prompt text unless asked.

The line's shape (the proxy writes it; other logs are mapped onto it with a column map):

    {"time": ISO-8601 arrival, "request": {OpenAI completion or chat body}, "response": {the server's
     body, or the merged stream}, "latency_s": float, "ttft_s": float?, "labels": {str: str}?,
     "in_flight": int?, "status": int?}

Acceptance is read by `engines.request_acceptance` (llama-server `timings.draft_n`, vLLM
`metrics.speculative_decoding`, SGLang `meta_info`); token counts from `usage` (OpenAI), else
llama-server's `timings.prompt_n` / `predicted_n` or `tokens_evaluated` / `tokens_predicted`, else
SGLang's `meta_info.prompt_tokens` / `completion_tokens`.

What a line may hold (anything else is an InputError naming the file and line, docs/traffic.md):
counts are whole numbers from 0 to MAX_COUNT, seconds are finite, >= 0 and at most MAX_SECONDS,
`time` is ISO-8601 with a zone or Unix seconds within 1970 .. 9999, `status` is an HTTP status
(100 .. 599; absent: 200), labels map names to strings, numbers or booleans. The request body is
the client's: a `temperature` that is not a number is read as 1.0 (the OpenAI default) and
prompt text that is not a string is left out.
"""

from __future__ import annotations

import json
import math
import re
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
# The longest declared language the store keeps (its `language` column); BCP 47 tags are shorter.
MAX_LANGUAGE = 16
# Counts are exact in a float64 (the columnar reader's type) and their squares stay finite.
MAX_COUNT = 2**53 - 1
# Longer than any request a server answers (11.6 days); the sums of squares stay finite.
MAX_SECONDS = 1e6
# Arrival times: Unix seconds from 1970-01-01 to the end of 9999 (what ISO-8601 can write).
MAX_UNIX_TIME = 253402300799.0
HTTP_STATUS = range(100, 600)
_SURROGATE = re.compile("[\ud800-\udfff]")


def json_type(value: Any) -> str:
    """A value's type in JSON's words (object, array, string, ...)."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def is_utf8_text(text: str) -> bool:
    """False for a string with a lone surrogate (JSON's \\ud800 escape): it is not text and no store takes it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def canonical_labels(labels: Mapping[str, Any]) -> tuple[str, str | None]:
    """(the labels as stored: values as strings, keys sorted, JSON; the language they declare, if any).
    An InputError (without the line: the callers add it) for labels that are not names to plain values."""
    for key, value in labels.items():
        if isinstance(value, (Mapping, list)):
            raise InputError(f"label {key!r} is a JSON {json_type(value)}; a label's value is a string, a number or true/false")
        if not is_utf8_text(str(key)) or not is_utf8_text(str(value)):
            raise InputError(f"label {key!r} holds a lone UTF-16 surrogate (an escape like \\ud800), not text")
    flat = {str(k): str(v) for k, v in labels.items()}
    declared = next((flat[k] for k in LANGUAGE_LABELS if k in flat), None)
    if declared is not None and len(declared) > MAX_LANGUAGE:
        raise InputError(f"the language label {declared[:40]!r} is longer than {MAX_LANGUAGE} characters, not a language code")
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
    """None, or a count (`integer`: a whole number 0 .. MAX_COUNT) or seconds (0 .. MAX_SECONDS)."""
    if value is None:
        return None
    top, what = (
        (MAX_COUNT, f"a count (a whole number from 0 to {MAX_COUNT})") if integer else (MAX_SECONDS, f"seconds from 0 to {MAX_SECONDS:g}")
    )
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= top or (integer and value != int(value)):
        raise InputError(f"{where} is {_shown(value)}, not {what}")
    return int(value) if integer else float(value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _status(value: Any, where: str) -> int:
    if value is None:
        return 200
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value not in HTTP_STATUS or value != int(value):
        raise InputError(f"{where}: 'status' is {_shown(value)}, not an HTTP status code (a whole number from 100 to 599)")
    return int(value)


def prompt_text(request: Mapping[str, Any]) -> str:
    """The prompt's text: `prompt` (a string, or the first of a list), else the chat messages' text joined."""
    prompt = request.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return prompt[0]
    parts = []
    messages = request.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
            parts.extend(p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return "\n".join(parts)


def _text(text: str) -> str:
    """The prompt as stored: a lone surrogate (a client's cut UTF-16 pair) becomes U+FFFD."""
    return text if is_utf8_text(text) else _SURROGATE.sub("\ufffd", text)


# The parts of a server's answer that the row is read from: when there, they are objects.
ANSWER_OBJECTS = ("usage", "timings", "metrics", "meta_info")


def _answer_shape(response: Mapping[str, Any], where: str) -> None:
    metrics = response.get("metrics")
    parts = {name: response.get(name) for name in ANSWER_OBJECTS}
    if isinstance(metrics, Mapping):
        parts["metrics.speculative_decoding"] = metrics.get("speculative_decoding")
    for name, part in parts.items():
        if part is not None and not isinstance(part, Mapping):
            raise InputError(f"{where}: the server's '{name}' is a JSON {json_type(part)}, not an object")


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
        seconds = float(value)  # Unix seconds
    elif not isinstance(value, str):
        raise InputError(f"{where}: 'time' is {_shown(value)}; write an ISO-8601 time such as 2026-01-31T12:00:00Z")
    else:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise InputError(f"{where}: 'time' {_shown(value)} is not an ISO-8601 time such as 2026-01-31T12:00:00Z") from None
        if parsed.tzinfo is None:
            raise InputError(f"{where}: 'time' {value!r} has no time zone; write it in UTC, e.g. {value}Z")
        seconds = parsed.timestamp()
    if not 0 <= seconds <= MAX_UNIX_TIME:
        raise InputError(f"{where}: 'time' {_shown(value)} is not between 1970 and the end of 9999 (Unix seconds 0 .. {MAX_UNIX_TIME:.0f})")
    return seconds


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
    _answer_shape(response, where)
    try:
        found = request_acceptance(response)
    except InputError as err:
        raise InputError(f"{where}: {err}") from None
    proposed, accepted = (found.proposed, found.accepted) if found is not None else (None, None)
    if found is not None:
        proposed = _number(proposed, f"{where}: the server's {found.source}", integer=True)
        accepted = _number(accepted, f"{where}: the server's accepted drafts", integer=True)
    if "proposed" in column_map:
        proposed = _number(get("proposed"), f"{where}: proposed", integer=True)
        accepted = _number(get("accepted"), f"{where}: accepted", integer=True)
    prompt_n, output_n = _tokens(response)
    labels = get("labels") or {}
    if not isinstance(labels, Mapping):
        raise InputError(f"{where}: 'labels' is a JSON {json_type(labels)}, not an object of names to values")
    try:
        canonical_labels(labels)
    except InputError as err:
        raise InputError(f"{where}: {err}") from None
    temperature = request.get("temperature", 1.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature):
        temperature = 1.0  # the OpenAI default where the body says nothing usable
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
        _status(get("status"), where),
        found.source if found is not None else "",
        {str(k): str(v) for k, v in labels.items()},
        _text(prompt_text(request)),
    )
