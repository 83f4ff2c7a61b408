"""The numeric options of `mitigate`, checked in one place before anything is read or trained."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, ValidationError

from specaudit._validation import SETTINGS_CONFIG, input_error, seed_field


class MitigationOptions(BaseModel):
    """Ranges of mitigate's flags (None: the budget's default). Zero equivalence or timing prompts
    is a documented way to skip that step; a negative count is not."""

    model_config = SETTINGS_CONFIG

    held_out: float = Field(0.5, gt=0, lt=1, strict=True, description="the fraction of prompts held out, e.g. 0.5")
    train_layers: int = Field(2, ge=1, strict=True)
    learning_rate: float = Field(3e-4, gt=0, strict=True, description="the AdamW learning rate, e.g. 3e-4")
    per_group: int | None = Field(None, ge=1, strict=True)
    samples: int | None = Field(None, ge=1, strict=True)
    max_new_tokens: int | None = Field(None, ge=1, strict=True)
    steps: int | None = Field(None, ge=1, strict=True)
    batch_size: int | None = Field(None, ge=1, strict=True)
    equivalence_prompts: int | None = Field(None, ge=0, strict=True, description="0 skips the equivalence check")
    timing_prompts: int | None = Field(None, ge=0, strict=True, description="0 skips the timing")
    seed: int = seed_field()


def check_options(**options: Any) -> MitigationOptions:
    """The options, or the InputError naming the first bad one as its flag."""
    try:
        return MitigationOptions(**options)
    except ValidationError as err:
        raise input_error(
            err, MitigationOptions, lambda field: f"--{field.replace('_', '-')}", lambda names: f"unknown option(s) {', '.join(names)}"
        ) from None
