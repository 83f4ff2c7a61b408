"""Grammars (decoding.grammar): the target masked to what a JSON schema or GBNF grammar allows at
each prefix, renormalised, in the one `warp`; the outputs of the reference engines parse under the
grammar; `grammar=FILE` in --sampling; each engine passes it in its API's field or refuses it."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("llguidance")

from specaudit.config import RunConfig  # noqa: E402
from specaudit.decoding import SamplingSpec, warp  # noqa: E402
from specaudit.decoding.grammar import grammar_violation  # noqa: E402
from specaudit.decoding.settings import parse_setting, setting_label  # noqa: E402
from specaudit.decoding.warping import Prefix  # noqa: E402
from specaudit.errors import InputError  # noqa: E402

GBNF = 'root ::= [a-z0-9 ]+ "."'
SCHEMA = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})


def _ids(pair, text):
    return list(pair.tokenizer(text, add_special_tokens=False)["input_ids"])


def test_warp_masks_to_what_the_grammar_allows_and_renormalises(tiny_pair):
    vocab, tokenizer = tiny_pair.vocab_size, tiny_pair.tokenizer
    spec = SamplingSpec(temperature=1.0, grammar=GBNF)
    logits = torch.randn(4, vocab, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    output = _ids(tiny_pair, "ab.")
    probs = warp(logits, spec, Prefix([5, 6], output))  # rows after "", "a", "ab", "ab."
    words = set("abcdefghijklmnopqrstuvwxyz0123456789 ")
    word_ids = {i for i in range(vocab) if tokenizer.decode([i]) in words}
    stop_id = {i for i in range(vocab) if tokenizer.decode([i]) == "."}
    allowed = [word_ids, word_ids | stop_id, word_ids | stop_id, {tokenizer.eos_token_id}]
    for row, wanted in enumerate(allowed):
        assert set(torch.nonzero(probs[row]).flatten().tolist()) == wanted
        mask = torch.zeros(vocab, dtype=torch.bool)
        mask[list(wanted)] = True
        expected = logits[row].masked_fill(~mask, float("-inf")).softmax(-1)
        assert torch.allclose(probs[row], expected, atol=1e-12)  # the target masked, renormalised


@pytest.mark.parametrize("engine", ["vanilla", "speculative"])
def test_reference_outputs_parse_under_the_grammar(tiny_pair, engine):
    from specaudit.decoding.speculative import speculative_generate
    from specaudit.decoding.vanilla import vanilla_generate
    from specaudit.engines.decode import eos_token_ids

    bounded = 'root ::= ("yes" | "no") " " [0-9] [0-9]? "."'
    spec, eos = SamplingSpec(temperature=1.0, grammar=bounded), eos_token_ids(tiny_pair)
    for seed in range(4):
        common = dict(
            spec=spec, max_new_tokens=12, generator=torch.Generator().manual_seed(seed), eos_ids=eos, vocab_size=tiny_pair.vocab_size
        )
        prompt = _ids(tiny_pair, "Answer:")
        if engine == "vanilla":
            out = vanilla_generate(tiny_pair.target, prompt, **common)
        else:
            out = speculative_generate(tiny_pair.target, tiny_pair.draft, prompt, k=4, **common)
        assert out.finish_reason == "eos"  # the bounded grammar ends every output
        assert grammar_violation(bounded, out.tokens, True, sorted(eos)) is None
    # a broken output is named: a capital where the grammar allows none, and an unfinished sentence
    assert "not allowed" in grammar_violation(GBNF, _ids(tiny_pair, "aB."), True)
    assert "before the grammar's sentence is complete" in grammar_violation(GBNF, _ids(tiny_pair, "ab"), True)
    assert grammar_violation(GBNF, _ids(tiny_pair, "ab"), False) is None  # cut by the length budget: a valid prefix


def test_grammar_setting_reads_and_checks_the_file(tmp_path):
    gbnf, schema, bad = tmp_path / "g.gbnf", tmp_path / "s.json", tmp_path / "bad.gbnf"
    gbnf.write_text(GBNF)
    schema.write_text(SCHEMA)
    bad.write_text("root ::= missing")
    spec = parse_setting(f"t=1,grammar={gbnf}")
    assert spec.grammar == GBNF and spec.path_dependent and not spec.penalised
    assert setting_label(spec).startswith("t=1,grammar=#") and len(setting_label(spec)) == len("t=1,grammar=#") + 8
    assert parse_setting(f"t=1,grammar={schema}").grammar == SCHEMA
    with pytest.raises(InputError, match=r"bad.gbnf: the grammar does not compile \(.*missing"):
        parse_setting(f"t=1,grammar={bad}")
    with pytest.raises(InputError, match="cannot read the grammar file"):
        parse_setting(f"t=1,grammar={tmp_path / 'none.gbnf'}")


def test_engines_pass_the_grammar_in_their_fields_or_refuse_it():
    from specaudit.engines.endpoint.client import request_features as endpoint_features
    from specaudit.engines.llama_server.client import request_features as llama_features

    assert llama_features(SamplingSpec(grammar=GBNF), 64)["grammar"] == GBNF
    assert llama_features(SamplingSpec(grammar=SCHEMA), 64)["json_schema"] == json.loads(SCHEMA)
    assert endpoint_features(SamplingSpec(grammar=GBNF))["structured_outputs"] == {"grammar": GBNF}
    assert endpoint_features(SamplingSpec(grammar=SCHEMA))["structured_outputs"] == {"json": json.loads(SCHEMA)}
    for engines, why in [
        ("screen", "audit stop strings and grammars with --engines vanilla,speculative"),
        ("tree", "without the prefix penalties and grammars need"),
        ("hf-assisted", "no grammar"),
        ("llama-cpp", "fixed sampler chain"),
    ]:
        with pytest.raises(InputError, match=f"--engines {engines} cannot apply grammar: .*{why}"):
            RunConfig(engines=engines, grammar=GBNF)
    RunConfig(engines="vanilla,speculative", grammar=GBNF)  # the reference engines take it
    RunConfig(engines="vllm", grammar=GBNF)  # as vLLM's structured_outputs (engines.vllm.client.sampling_kwargs)


def test_the_grammar_invariant_names_a_broken_record(tiny_pair):
    from specaudit.analysis.invariants import output_limits
    from specaudit.execution.invariants import record_violations

    limits = output_limits({"config": {"max_new_tokens": 16}}, tiny_pair)
    record = {"key": "p|speculative|0", "engine": "speculative", "sampling": {"grammar": GBNF}, "finish_reason": "eos"}
    good = _ids(tiny_pair, "ab.") + [tiny_pair.tokenizer.eos_token_id]
    assert [v for v in record_violations({**record, "output_token_ids": good}, limits) if v["check"] == "grammar"] == []
    broken = record_violations({**record, "output_token_ids": _ids(tiny_pair, "aB.")}, limits)
    assert [v["check"] for v in broken if v["check"] == "grammar"] == ["grammar"]


def test_grammars_are_matched_on_the_tokenizer_remembered_last(tiny_pair):
    """analyze makes the analysed pair's tokenizer the grammar's (remember_tokenizer), also for a
    llama.cpp or OpenVINO target, which loads no torch pair (a llama-server grammar run once
    failed its analysis for want of it): the same ids are judged on that tokenizer's bytes."""
    from specaudit.models import load_tokenizer, loaded_tokenizer, remember_tokenizer

    embedded = load_tokenizer("default")
    try:
        remember_tokenizer(embedded)
        assert loaded_tokenizer() is embedded
        assert grammar_violation(SCHEMA, list(embedded('{"a": 12}', add_special_tokens=False)["input_ids"]), True) is None
        assert "not allowed" in grammar_violation(SCHEMA, list(embedded('{"b": 1}', add_special_tokens=False)["input_ids"]), True)
    finally:
        remember_tokenizer(tiny_pair.tokenizer)  # the other tests match on the tiny pair's tokens


def test_a_forced_literal_allows_every_tokenization_of_it(tiny_pair):
    """Where the grammar forces whole text (a JSON key, a literal), the mask is byte-level like
    llama.cpp's and xgrammar's: every token whose bytes fit, not only the canonical one that
    llguidance's own mask keeps (a llama-server grammar run emitted "an" "sw" "er" for "answer").
    On the embedded model's tokenizer: the tiny pair's spells every word one way."""
    from specaudit.decoding.grammar import _matcher
    from specaudit.models import load_tokenizer, remember_tokenizer

    literal = 'root ::= "answer" " " [0-9]'
    embedded = load_tokenizer("default")
    try:
        remember_tokenizer(embedded)
        vocab = len(embedded)
        probs = warp(torch.zeros(1, vocab, dtype=torch.float64), SamplingSpec(temperature=1.0, grammar=literal), Prefix([5], []))
        allowed = set(torch.nonzero(probs[0]).flatten().tolist())
        matcher = _matcher(literal)
        assert allowed == {token for token in range(vocab) if matcher.validate_tokens([token]) == 1}
        assert {embedded.decode([t]) for t in allowed} >= {"a", "an", "ans", "answer"}
        ids = [embedded.convert_tokens_to_ids(piece) for piece in ("an", "sw", "er")] + list(
            embedded(" 7", add_special_tokens=False)["input_ids"]
        )
        assert grammar_violation(literal, ids, True) is None  # a non-canonical tokenization is a sentence too
    finally:
        remember_tokenizer(tiny_pair.tokenizer)
