"""Grammars (structured output): which tokens a JSON schema or a GBNF grammar allows at a position.

The target's distribution under a grammar is its processed distribution masked to the tokens the
grammar allows after the output so far, renormalised (what vLLM's and SGLang's xgrammar masks and
llama.cpp's grammar sampler give when nothing else truncates). The grammar itself is matched by
`llguidance` (the library llama.cpp uses), an optional dependency (`pip install
'specaudit[grammar]'`), never by code of our own (decoding._grammar_source compiles it).

"Allows" is byte-level: a token is allowed when its bytes continue a sentence of the grammar, as
llama.cpp's grammar sampler and xgrammar decide. llguidance's own mask is narrower where the
grammar forces a whole lexeme (a JSON key, a GBNF literal): it keeps only that text's canonical
first token ("answer", not "an" or "ans"), so `_allowed` adds back every token whose bytes are a
prefix of the forced bytes or extend them, each checked by the matcher. (An engine built on
llguidance's policy, e.g. vLLM's `guidance` backend, samples from that narrower target.)

A grammar needs the target's tokenizer (token ids to bytes): the one `load_pair` loaded last
(`models.loaded_tokenizer`; one process audits one target). `warp` masks every row of a spec
with a grammar, each at its own prefix, like the penalties. A row after a token the grammar
rejects (an engine that broke it) is left unmasked: the target is undefined there, and the
breaking token itself already has probability 0 at its own row.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from specaudit.decoding._grammar_source import compile_grammar, llguidance_module
from specaudit.errors import InputError

if TYPE_CHECKING:
    import torch

_TOKENIZER: dict[int, tuple[Any, Any]] = {}  # id(HF tokenizer) -> (it, its llguidance twin)


class _TokenBytes:
    """A tokenizer's vocabulary as bytes, for tokenizers whose decoder llguidance cannot read
    (the tiny test pair's character tokenizer); special tokens are marked as llguidance expects."""

    def __init__(self, tokenizer: Any) -> None:
        self.eos_token_id = tokenizer.eos_token_id
        self.bos_token_id = tokenizer.bos_token_id
        self.special_token_ids = list(tokenizer.all_special_ids)
        special = set(self.special_token_ids)
        names = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        self.tokens = [b"\xff" + str(n).encode() if i in special else tokenizer.decode([i]).encode() for i, n in enumerate(names)]
        self._tokenizer = tokenizer

    def __call__(self, text: bytes | str) -> list[int]:
        text = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])


def _tokenizer(tokenizer: Any = None) -> Any:
    """llguidance's twin of `tokenizer` (default: the last loaded target's), built once per tokenizer."""
    from specaudit.models import loaded_tokenizer

    wanted = tokenizer if tokenizer is not None else loaded_tokenizer()
    if wanted is None:
        raise InputError("a grammar needs the target's tokenizer: load the model pair first (specaudit.models.load_pair)")
    key = id(wanted)
    if key not in _TOKENIZER:  # about a second for a large vocabulary
        llguidance = llguidance_module()
        from llguidance.hf import from_tokenizer

        try:
            ll = from_tokenizer(wanted)
        except ValueError:  # a decoder llguidance cannot read: give it the vocabulary's bytes
            ll = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_TokenBytes(wanted)))
        _TOKENIZER[key] = (wanted, ll)  # the tokenizer is kept, so its id stays its own
    return _TOKENIZER[key][1]


def _matcher(text: str, tokenizer: Any = None) -> Any:
    """A matcher at the grammar's start (copy it before use)."""
    ll = _tokenizer(tokenizer)
    return _compiled(text, id(ll))


@lru_cache(maxsize=16)
def _compiled(text: str, ll_id: int) -> Any:
    ll = next(twin for _, twin in _TOKENIZER.values() if id(twin) == ll_id)
    matcher = llguidance_module().LLMatcher(ll, compile_grammar(text), log_level=0)
    if matcher.is_error():
        raise InputError(f"the grammar does not compile ({' '.join(matcher.get_error().split())[:200]})")
    return matcher


@lru_cache(maxsize=4)
def _token_bytes(ll_id: int) -> tuple[bytes, ...]:
    ll = next(twin for _, twin in _TOKENIZER.values() if id(twin) == ll_id)
    return tuple(ll.decode_bytes([token]) if not ll.is_special_token(token) else b"" for token in range(ll.vocab_size))


def _allowed(matcher: Any, vocab: int) -> np.ndarray:
    """[vocab] booleans: the tokens whose bytes continue a sentence of the grammar (module docstring)."""
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
    out = np.zeros(vocab, dtype=bool)
    n = min(vocab, bits.size)
    out[:n] = bits[:n].astype(bool)
    forced = matcher.compute_ff_bytes()
    if forced:  # llguidance kept the forced text's canonical token only: add its other tokenizations
        pieces = _token_bytes(id(_tokenizer()))
        for token in range(min(vocab, len(pieces))):
            piece = pieces[token]
            if piece and not out[token] and (forced.startswith(piece) or piece.startswith(forced)):
                out[token] = matcher.validate_tokens([token]) == 1
    return out


def grammar_mask(text: str, output: Sequence[int], rows: int, vocab: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """[rows, vocab] booleans: the tokens the grammar allows at each of `rows` consecutive positions,
    the last following the whole `output`, each earlier one a token shorter (warp's convention)."""
    matcher = _matcher(text).deep_copy()
    output = list(output)
    first = len(output) - (rows - 1)
    if first < 0:
        raise ValueError(f"a block of {rows} positions needs at least {rows - 1} output tokens, got {len(output)}")
    masks = np.ones((rows, vocab), dtype=bool)
    broken = matcher.consume_tokens(output[:first]) is False or matcher.is_error()
    for row in range(rows):
        if broken:
            break  # the output left the grammar before this row: left unmasked (module docstring)
        masks[row] = _allowed(matcher, vocab)
        if row < rows - 1 and (not matcher.consume_token(output[first + row]) or matcher.is_error()):
            broken = True
    import torch

    return torch.from_numpy(masks).to(device)


def grammar_violation(text: str, ids: Sequence[int], complete: bool, eos_ids: Sequence[int] = (), tokenizer: Any = None) -> str | None:
    """Why an output breaks the grammar (None: it does not): a token the grammar does not allow
    where it stands, or, for a `complete` output (ended by end-of-sequence or a stop), a sentence
    the grammar has not finished. An end-of-sequence token may end the output."""
    matcher = _matcher(text, tokenizer).deep_copy()
    ids = list(ids)
    if ids and ids[-1] in set(eos_ids):
        ids = ids[:-1]
    for position, token in enumerate(ids):
        if not matcher.consume_token(token) or matcher.is_error():
            return f"token {token} at position {position} is not allowed by the grammar there"
    if complete and not matcher.is_accepting():
        return f"the output ends after {len(ids)} tokens before the grammar's sentence is complete"
    return None


__all__ = ["grammar_mask", "grammar_violation"]
