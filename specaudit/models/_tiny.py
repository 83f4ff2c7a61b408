"""Tiny random models for tests: real transformers Llama models, seconds to build and run."""

from __future__ import annotations

import string
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

# Characters the tiny tokenizer knows; everything else maps to <unk>.
_CHARS = string.ascii_letters + string.digits + " .,;:!?'\"-()\n"
_SPECIALS = ["<unk>", "<s>", "</s>"]


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer (vocab ≈ 80) so that prompts in text work with tiny models."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(_SPECIALS + list(_CHARS))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<unk>")


def tiny_config(vocab_size: int, layers: int = 2, context: int = 512) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )


def tiny_model(seed: int = 0, vocab_size: int | None = None, layers: int = 2, context: int = 512) -> LlamaForCausalLM:
    """A randomly initialised 2-layer Llama. Logits are scaled up so distributions are peaked
    enough to look like a language model's (random init gives near-uniform outputs)."""
    vocab_size = vocab_size or len(tiny_tokenizer())
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(vocab_size, layers, context))
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)
    return model.eval()


def tiny_draft_of(target: LlamaForCausalLM, noise: float = 0.3, seed: int = 1) -> LlamaForCausalLM:
    """A draft that resembles the target: its weights plus relative Gaussian noise."""
    torch.manual_seed(seed)
    draft = LlamaForCausalLM(target.config)
    draft.load_state_dict(target.state_dict())
    with torch.no_grad():
        for param in draft.parameters():
            param.add_(noise * param.std() * torch.randn_like(param))
    return draft.eval()


def save_tiny_pair(folder: str | Path, seed: int = 0, noise: float = 0.3, context: int = 512) -> tuple[Path, Path]:
    """Write a tiny target and draft as HF folders (with tokenizer) under `folder`; `context` is
    their max_position_embeddings (512 by default, so that prompts of a few hundred tokens are long)."""
    from specaudit.models._loading import _quiet_transformers

    _quiet_transformers()
    folder = Path(folder)
    tokenizer = tiny_tokenizer()
    target = tiny_model(seed, context=context)
    draft = tiny_draft_of(target, noise=noise, seed=seed + 1)
    paths = []
    for name, model in (("target", target), ("draft", draft)):
        path = folder / name
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        paths.append(path)
    return paths[0], paths[1]
