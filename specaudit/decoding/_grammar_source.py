"""A grammar's source: a JSON schema or a GBNF grammar, compiled by `llguidance` (an optional
dependency: `pip install 'specaudit[grammar]'`). Torch- and model-free, so `--sampling
grammar=FILE` is checked before anything loads; the masks are decoding.grammar's."""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from typing import Any

from specaudit.errors import InputError


def grammar_format(text: str) -> str:
    """ "json_schema" when the text is a JSON object (a schema), else "gbnf" (llama.cpp's GBNF;
    llguidance also reads its own Lark syntax here)."""
    try:
        return "json_schema" if isinstance(json.loads(text), dict) else "gbnf"
    except ValueError:
        return "gbnf"


def structured_outputs(grammar: str) -> dict:
    """A grammar as vLLM's `structured_outputs` fields (v0.12 on; a server's request field and the
    offline SamplingParams' alike): a JSON schema as `json`, GBNF as `grammar` (xgrammar reads it)."""
    return {"json": json.loads(grammar)} if grammar_format(grammar) == "json_schema" else {"grammar": grammar}


def grammar_available() -> bool:
    """Whether llguidance is installed (grammars are an optional extra)."""
    return importlib.util.find_spec("llguidance") is not None


def llguidance_module() -> Any:
    try:
        import llguidance
    except ImportError:
        raise InputError("grammar= needs the llguidance package: pip install 'specaudit[grammar]'") from None
    return llguidance


def _clause(message: str) -> str:
    return " ".join(str(message).split())[:200]


@lru_cache(maxsize=16)
def compile_grammar(text: str) -> str:
    """The llguidance grammar of a JSON schema or GBNF text; an InputError naming what is wrong.
    Cached: a server checks each request's grammar, mostly the same one."""
    llguidance = llguidance_module()
    try:
        compiled = llguidance.grammar_from(grammar_format(text), text)
    except (ValueError, TypeError) as err:
        raise InputError(f"the grammar does not compile ({_clause(err)})") from None
    problem = llguidance.LLMatcher.validate_grammar(compiled)
    if problem:
        raise InputError(f"the grammar does not compile ({_clause(problem)})")
    return compiled


__all__ = ["compile_grammar", "grammar_available", "grammar_format", "llguidance_module"]
