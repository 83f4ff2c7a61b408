"""What an OpenAI-compatible server may answer: one pydantic model per API shape.

A server is untrusted input. Every JSON body (a `/v1/completions` answer, each chunk of its
stream, the `/v1/models` list) is validated here before the endpoint backend reads a field of it:
the fields specaudit reads are typed strictly (a string is not a number, an object is not a list),
numbers are finite (a logprob may be -inf, zero probability, but not NaN, +inf or above 0), token
ids are non-negative integers; fields specaudit does not read pass through. What the answer as a
whole must satisfy (its size, its token count against the request's max_tokens, logprob lists one
entry per token, ids inside the vocabulary) is checked on the merged answer by the backend.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from specaudit._validation import expected

# A logprob above 0 is a probability above 1; float32 rounding gives at most ~1e-6.
LOGPROB_SLACK = 1e-4
# Bounds of one answer, from the request's max_tokens: a token's text is a few bytes (a long
# whitespace run a few hundred), a streamed chunk with top-20 logprobs about 2 KiB.
TEXT_CHARS_PER_TOKEN = 1024
ANSWER_BYTES_PER_TOKEN = 64 * 1024
ANSWER_BYTES_BASE = 1 << 20
TOKEN_ID_PREFIX = "token_id:"  # a token named by its id in logprobs (vLLM's return_tokens_as_token_ids)


def _logprob(value: float) -> float:
    if math.isnan(value) or value > LOGPROB_SLACK:
        raise ValueError(f"a logprob is a number <= 0 (or -inf), got {value!r}")
    return value


def _none_is_empty(value: Any) -> Any:
    return "" if value is None else value


Logprob = Annotated[float, Field(allow_inf_nan=True), AfterValidator(_logprob)]
TokenId = Annotated[int, Field(ge=0)]


class _Part(BaseModel):
    """Strict for what specaudit reads; other fields a server adds are kept as they are."""

    model_config = ConfigDict(extra="allow", strict=True)


class TopLogprob(_Part):
    id: TokenId
    logprob: Logprob


class ContentLogprob(TopLogprob):
    """One emitted token in the chat API's shape, which llama-server answers with on /v1/completions too."""

    top_logprobs: list[TopLogprob] = []


class LogprobsPart(_Part):
    """`choices[i].logprobs` of the legacy completions API, or its `content` list (llama-server),
    read into the legacy lists with tokens named by id ("token_id:N", as vLLM writes them)."""

    tokens: list[str] | None = None
    token_logprobs: list[Logprob | None] | None = None
    top_logprobs: list[dict[str, Logprob | None] | None] | None = None
    content: list[ContentLogprob] | None = None

    @model_validator(mode="after")
    def _from_content(self) -> LogprobsPart:
        if self.content is not None and self.tokens is None:
            self.tokens = [f"{TOKEN_ID_PREFIX}{entry.id}" for entry in self.content]
            self.token_logprobs = [entry.logprob for entry in self.content]
            self.top_logprobs = [{f"{TOKEN_ID_PREFIX}{top.id}": top.logprob for top in entry.top_logprobs} for entry in self.content]
        return self


class ChoicePart(_Part):
    index: int = 0
    text: Annotated[str, BeforeValidator(_none_is_empty)] = ""
    finish_reason: str | None = None
    logprobs: LogprobsPart | None = None
    token_ids: list[TokenId] | None = None  # vLLM's return_token_ids


class LlamaServerVerbose(_Part):
    """llama-server's `__verbose` (asked for with `verbose: true`): its native answer, whose `tokens`
    (with `return_tokens: true`) lists every generated token, where its logprobs skip some."""

    tokens: list[TokenId] | None = None


class CompletionPart(_Part):
    """A non-streamed answer, or one chunk of a stream (the final usage chunk has no choices)."""

    choices: list[ChoicePart] | None = None
    usage: dict[str, Any] | None = None
    verbose: LlamaServerVerbose | None = Field(None, alias="__verbose")


class ModelEntry(_Part):
    id: str


class ModelList(_Part):
    data: list[ModelEntry]


def problem(err: ValidationError) -> str:
    """The first thing wrong in a body, as `where: what, got VALUE` (VALUE shortened)."""
    first = err.errors(include_url=False)[0]
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]).lstrip(".") or "the body"
    shown = repr(first.get("input"))
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    if first["type"] == "value_error":  # our own validators say what they want
        return f"{where}: {first['msg'].removeprefix('Value error, ')}"
    return f"{where} must be {expected(first['type'], first['msg'])}, got {shown}"


__all__ = [
    "ANSWER_BYTES_BASE",
    "ANSWER_BYTES_PER_TOKEN",
    "TEXT_CHARS_PER_TOKEN",
    "ChoicePart",
    "CompletionPart",
    "LogprobsPart",
    "ModelList",
    "problem",
]
