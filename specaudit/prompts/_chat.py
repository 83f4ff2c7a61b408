"""Turning a prompt into the token ids a model is given: one user turn, or a whole conversation."""

from __future__ import annotations

from typing import Any

from specaudit.prompts._model import Prompt


def prompt_token_ids(tokenizer: Any, prompt: Prompt | str, chat_template: bool = True) -> list[int]:
    """Token ids of a prompt, ending where the model's reply begins.

    A prompt with `messages` goes through the tokenizer's chat template as the whole conversation
    (system, user and assistant turns in order, then the generation prompt); a text prompt as one
    user turn. Without a chat template (or with chat_template=False) the text is tokenized as is;
    for a conversation that text is its transcript ("role: content" paragraphs).
    """
    text = prompt if isinstance(prompt, str) else prompt.text
    messages = None if isinstance(prompt, str) else prompt.messages
    if chat_template and getattr(tokenizer, "chat_template", None):
        turns = [dict(m) for m in messages] if messages is not None else [{"role": "user", "content": text}]
        encoded = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=True)
        ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        return list(ids)
    return list(tokenizer(text)["input_ids"])
