"""Prompt sets: loading any source through `datasets`, validation, stratified sampling, statistics.

    >>> from specaudit.prompts import load_prompts
    >>> prompts = load_prompts("core", dimensions=["dialect"], per_group=10, seed=0)

Named sets live in prompt_sets/<name>/ with a manifest.yaml (format in docs/prompts.md); any
JSONL/CSV/Parquet file or Hub dataset works too, with a column map when its columns are not
named id/text/pair_id/attributes (`text=turns[0]` indexes a list column, `messages=COLUMN`
reads conversations, which `prompt_token_ids` feeds through the chat template).
"""

from specaudit.prompts._chat import prompt_token_ids
from specaudit.prompts._checks import MAX_PROMPT_BYTES
from specaudit.prompts._load import (
    ChecksumEntry,
    load_prompts,
    update_checksums,
    validate_prompt_set,
)
from specaudit.prompts._manifest import (
    DimensionSpec,
    Manifest,
    find_prompt_set,
    list_prompt_sets,
    prompt_set_dirs,
    read_manifest,
)
from specaudit.prompts._model import (
    Issue,
    Prompt,
    PromptSet,
    PromptSetWarning,
    ValidationReport,
)
from specaudit.prompts._read import ColumnMap, parse_column_map
from specaudit.prompts._stats import prompt_set_stats, resolve_tokenizer
from specaudit.prompts._text import (
    describe_prompt_set,
    format_checksums,
    format_prompt_sets,
    format_stats,
    format_validation,
)

__all__ = [
    "MAX_PROMPT_BYTES",
    "ChecksumEntry",
    "ColumnMap",
    "DimensionSpec",
    "Issue",
    "Manifest",
    "Prompt",
    "PromptSet",
    "PromptSetWarning",
    "ValidationReport",
    "describe_prompt_set",
    "find_prompt_set",
    "format_checksums",
    "format_prompt_sets",
    "format_stats",
    "format_validation",
    "list_prompt_sets",
    "load_prompts",
    "parse_column_map",
    "prompt_set_dirs",
    "prompt_set_stats",
    "prompt_token_ids",
    "read_manifest",
    "resolve_tokenizer",
    "update_checksums",
    "validate_prompt_set",
]
