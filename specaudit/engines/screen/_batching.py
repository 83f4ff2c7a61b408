"""Which rows the screen batches together: similar prompt lengths, bounded by rows and by tokens.

A batch is left-padded to its longest prompt, so its KV cache and activations scale with
rows x (longest prompt + new tokens). A bound on rows alone lets long prompts take memory in
proportion to their length (32 rows of 3,000 tokens hold ~4.5 GB of float32 KV cache on the
default model); a bound on those padded positions keeps a batch's memory about the same at
any prompt length, and short prompts still fill the row bound.
"""

from __future__ import annotations

DEFAULT_BATCH_ROWS = 32
DEFAULT_BATCH_TOKENS = 8192  # 32 rows up to 224 prompt tokens at the audit's 32 new tokens: 99% of core prompts


def token_batches(lengths: list[int], new_tokens: int, *, max_rows: int, max_tokens: int | None) -> list[list[int]]:
    """Indices into `lengths` (prompt lengths), shortest first, cut into batches of at most
    `max_rows` rows whose rows x (longest prompt + new_tokens) stays within `max_tokens`
    (None: no token bound). A row over the budget on its own gets a batch of its own."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        width = lengths[index] + new_tokens  # the widest so far: rows come in increasing length
        over_rows = len(current) + 1 > max_rows
        over_tokens = max_tokens is not None and (len(current) + 1) * width > max_tokens
        if current and (over_rows or over_tokens):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


__all__ = ["DEFAULT_BATCH_ROWS", "DEFAULT_BATCH_TOKENS", "token_batches"]
