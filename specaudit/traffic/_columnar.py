"""The fast path of `traffic ingest`: a chunk of log lines parsed at once by pyarrow's JSON reader.

Only the fields the store needs are read (an explicit schema; every other field is skipped
unparsed), and they are checked and combined as columns. The result is the same frame the
per-line path (`_fields.request_row`) makes, or None when any line of the chunk is not of the
common shape: a type the schema does not expect, a Unix-seconds time, SGLang's `meta_info`, vLLM's
acceptance histogram, an impossible count, a null where a missing key means something else. The
chunk then goes the per-line way, which reads everything and names the file and line of a bad one.
So a log either takes this path with identical rows or the per-line one; never different rows.

Labels are a free-form object: their JSON text is cut out of each line with a regular expression
(a flat object of scalars), and each distinct text is parsed once in Python (a log has few).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from specaudit.errors import InputError
from specaudit.traffic._fields import HTTP_STATUS, MAX_COUNT, MAX_SECONDS, MAX_UNIX_TIME, ROW_FIELDS, canonical_labels

if TYPE_CHECKING:
    from specaudit.traffic._read import Chunk

_NUM = pa.float64()
SCHEMA = pa.schema(
    [
        ("time", pa.string()),
        ("latency_s", _NUM),
        ("ttft_s", _NUM),
        ("in_flight", _NUM),
        ("status", _NUM),
        ("labels", pa.struct([])),  # only whether it is there: its text is cut out of the line
        ("request", pa.struct([("temperature", _NUM)])),
        (
            "response",
            pa.struct(
                [
                    ("usage", pa.struct([("prompt_tokens", _NUM), ("completion_tokens", _NUM)])),
                    ("timings", pa.struct([("prompt_n", _NUM), ("predicted_n", _NUM), ("draft_n", _NUM), ("draft_n_accepted", _NUM)])),
                    ("tokens_evaluated", _NUM),
                    ("tokens_predicted", _NUM),
                    (
                        "metrics",
                        pa.struct(
                            [
                                (
                                    "speculative_decoding",
                                    pa.struct(
                                        [
                                            ("num_draft_tokens", _NUM),
                                            ("num_accepted_draft_tokens", _NUM),
                                            ("num_spec_steps", _NUM),
                                            ("draft_acceptance_rate", _NUM),
                                            ("acceptance_histogram", pa.list_(_NUM)),
                                        ]
                                    ),
                                )
                            ]
                        ),
                    ),
                    ("meta_info", pa.struct([])),
                ]
            ),
        ),
    ]
)
_OPTIONS = pa_json.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore")
# Keys whose presence decides something (which server field, which token counts): a null there
# means "present" to the per-line path and "absent" to the columnar one, so such lines go per line.
_NULL_THAT_MATTERS = (
    r'"(draft_n|draft_n_accepted|num_draft_tokens|num_accepted_draft_tokens|num_spec_steps|'
    r'completion_tokens|predicted_n|tokens_predicted|time|latency_s)"\s*:\s*null'
)
# NaN and Infinity, which pyarrow's reader takes and JSON has not: such a line goes per line, which
# refuses it (a string that merely contains ": NaN" goes too, and is read there).
_NOT_JSON_NUMBER = r"[:\[,]\s*-?(NaN|Infinity)"
_LABELS_KEY = r'"labels"\s*:'
# A flat JSON object of scalars: strings (escapes allowed), numbers, true/false/null; no nesting.
_LABELS_OBJECT = r'"labels"\s*:\s*(?P<labels>\{(?:[^{}"\[\]]|"(?:[^"\\]|\\.)*")*\})'


def _field(array: pa.Array, path: str) -> pa.Array:
    """A nested field, null wherever a parent is null (StructArray.flatten carries the parent's nulls)."""
    for name in path.split("."):
        array = array.flatten()[array.type.get_field_index(name)]
    return array


def _numbers(array: pa.Array) -> np.ndarray:
    return array.to_numpy(zero_copy_only=False).astype(float)


def _counts_ok(values: np.ndarray) -> bool:
    """Known values are whole numbers 0 .. MAX_COUNT (the per-line path's test of a count)."""
    known = values[~np.isnan(values)]
    return bool(np.all((known >= 0) & (known <= MAX_COUNT) & (known == np.floor(known))))


def _seconds_ok(values: np.ndarray, *, required: bool) -> bool:
    """Known values are 0 .. MAX_SECONDS (the per-line path's test of seconds); none missing if `required`."""
    missing = np.isnan(values)
    known = values[~missing]
    return not (required and missing.any()) and bool(np.all((known >= 0) & (known <= MAX_SECONDS)))


def columnar_rows(chunk: Chunk) -> pd.DataFrame | None:
    """The chunk's rows (ROW_FIELDS, labels as their stored JSON text, plus `declared_language`), or None
    when some line needs the per-line path."""
    if not all(raw.startswith(b"{") for raw in chunk.raw):
        return None  # not all objects; and pyarrow 26's reader crashes (SIGSEGV) on a first line `null`
    try:
        table = pa_json.read_json(pa.py_buffer(b"\n".join(chunk.raw)), parse_options=_OPTIONS).combine_chunks()
    except pa.ArrowInvalid:
        return None
    if table.num_rows != len(chunk.raw):
        return None
    try:
        # The reader skips the fields outside its schema unchecked: the cast checks every byte is UTF-8.
        raw = pa.array(chunk.raw, type=pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:
        return None
    if pc.any(pc.match_substring_regex(raw, f"{_NULL_THAT_MATTERS}|{_NOT_JSON_NUMBER}")).as_py():
        return None
    row = pa.StructArray.from_arrays([table.column(n).chunk(0) for n in table.column_names], names=table.column_names)
    try:
        times = pc.cast(_field(row, "time"), pa.timestamp("us", "UTC"))
    except pa.ArrowInvalid:
        return None  # not ISO-8601 with a zone: the per-line path says why
    time_us = times.to_numpy(zero_copy_only=False).astype("datetime64[us]").astype(np.int64)
    if times.null_count or (time_us < 0).any() or (time_us > MAX_UNIX_TIME * 1e6).any():
        return None
    latency = _numbers(_field(row, "latency_s"))
    ttft = _numbers(_field(row, "ttft_s"))
    in_flight = _numbers(_field(row, "in_flight"))
    if not (_seconds_ok(latency, required=True) and _seconds_ok(ttft, required=False) and _counts_ok(in_flight)):
        return None
    if _field(row, "response.meta_info").null_count < len(row):
        return None  # SGLang: its rate-only and renamed counts are the per-line path's

    # Acceptance: llama-server's timings first, then vLLM's metrics (engines.request_acceptance's order).
    draft_n = _numbers(_field(row, "response.timings.draft_n"))
    draft_kept = _numbers(_field(row, "response.timings.draft_n_accepted"))
    spec = _field(row, "response.metrics.speculative_decoding")
    llama = ~np.isnan(draft_n)
    vllm = ~llama & spec.is_valid().to_numpy(zero_copy_only=False)
    vllm_proposed = _numbers(_field(spec, "num_draft_tokens"))
    vllm_kept = _numbers(_field(spec, "num_accepted_draft_tokens"))
    steps = _numbers(_field(spec, "num_spec_steps"))
    rate = _numbers(_field(spec, "draft_acceptance_rate"))
    if np.isnan(vllm_proposed[vllm]).any() or np.isnan(vllm_kept[vllm]).any():
        return None
    if _field(spec, "acceptance_histogram").is_valid().to_numpy(zero_copy_only=False)[vllm].any():
        return None
    if not _counts_ok(steps[vllm]) or ((rate[vllm] < 0) | (rate[vllm] > 1)).any():
        return None
    proposed = np.where(llama, draft_n, np.where(vllm, vllm_proposed, np.nan))
    accepted = np.where(llama, np.nan_to_num(draft_kept, nan=0.0), np.where(vllm, vllm_kept, np.nan))
    if not (_counts_ok(proposed) and _counts_ok(accepted)) or (accepted > proposed).any():
        return None
    source = np.where(llama, "timings.draft_n", np.where(vllm, "metrics.speculative_decoding", ""))

    # Token counts: OpenAI usage, else llama-server timings, else its native /completion fields.
    usage_out = _numbers(_field(row, "response.usage.completion_tokens"))
    timings_out = _numbers(_field(row, "response.timings.predicted_n"))
    native_out = _numbers(_field(row, "response.tokens_predicted"))
    by_usage, by_timings = ~np.isnan(usage_out), ~np.isnan(timings_out)
    output = np.where(by_usage, usage_out, np.where(by_timings, timings_out, native_out))
    prompt = np.where(
        by_usage,
        _numbers(_field(row, "response.usage.prompt_tokens")),
        np.where(by_timings, _numbers(_field(row, "response.timings.prompt_n")), _numbers(_field(row, "response.tokens_evaluated"))),
    )
    if not (_counts_ok(output) and _counts_ok(prompt)):
        return None

    labels = _labels(raw, _field(row, "labels").is_valid().to_numpy(zero_copy_only=False))
    if labels is None:
        return None
    temperature = _numbers(_field(row, "request.temperature"))
    temperature = np.where(np.isfinite(temperature), temperature, 1.0)
    status = np.nan_to_num(_numbers(_field(row, "status")), nan=200.0)
    if ((status < HTTP_STATUS.start) | (status >= HTTP_STATUS.stop) | (status != np.floor(status))).any():
        return None
    frame = pd.DataFrame(
        {
            "time": time_us / 1e6,
            "prompt_tokens": pd.array(prompt, dtype="Float64").astype("Int64"),
            "output_tokens": pd.array(output, dtype="Float64").astype("Int64"),
            "proposed": pd.array(proposed, dtype="Float64").astype("Int64"),
            "accepted": pd.array(accepted, dtype="Float64").astype("Int64"),
            "latency_s": latency,
            "ttft_s": pd.array(ttft, dtype="Float64"),
            "temperature": temperature,
            "in_flight": pd.array(in_flight, dtype="Float64").astype("Int64"),
            "status": np.trunc(status).astype(np.int64),
            "source": source,
            "labels": labels[0],
            "text": None,
            "declared_language": labels[1],
        }
    )
    return frame[[*ROW_FIELDS, "declared_language"]]


def _labels(raw: pa.Array, present: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(stored labels text, declared language or None) per line, or None if a line's labels are not a flat object
    that the expression finds exactly once."""
    keys = pc.count_substring_regex(raw, _LABELS_KEY).to_numpy(zero_copy_only=False)
    if not np.array_equal(keys, present.astype(keys.dtype)):
        return None  # "labels" also nested somewhere, or labels not an object
    texts = pc.struct_field(pc.extract_regex(raw, _LABELS_OBJECT), [0])
    if pc.sum(pc.is_valid(texts)).as_py() != int(present.sum()):
        return None  # an object the expression does not take whole (nested, or with brackets)
    encoded = pc.dictionary_encode(pc.fill_null(texts, "{}"))
    stored, declared = [], []
    for text in encoded.dictionary.to_pylist():
        try:
            value = json.loads(text)
            if not isinstance(value, dict):
                return None
            stored_text, language = canonical_labels(value)
        except (ValueError, InputError):
            return None
        stored.append(stored_text)
        declared.append(language)
    index = encoded.indices.to_numpy(zero_copy_only=False)
    return np.asarray(stored, dtype=object)[index], np.asarray(declared, dtype=object)[index]


__all__ = ["SCHEMA", "columnar_rows"]
