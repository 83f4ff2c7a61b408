"""Each engine passes the request features it supports in its own API's fields, and refuses the
rest in one sentence before anything loads (docs/request-features.md)."""

import json

import pytest

from specaudit.config import RunConfig
from specaudit.engines.endpoint.client import request_body as endpoint_body
from specaudit.engines.llama_server.client import SAMPLER_ORDER, request_body, request_features
from specaudit.engines.vllm.client import sampling_kwargs
from specaudit.errors import InputError

FEATURES = dict(repetition_penalty=1.3, min_p=0.1, logit_bias={5: -2.0}, stop=("END",))


def test_llama_server_gets_penalties_first_min_p_after_top_p_and_a_window_over_prompt_and_output():
    body = request_body(RunConfig(engines="llama-server", **FEATURES), [1, 2, 3], seed=7, max_tokens=32)
    assert body["samplers"] == ["penalties", *SAMPLER_ORDER, "min_p"]
    assert (body["repeat_penalty"], body["repeat_last_n"], body["min_p"]) == (1.3, 3 + 32, 0.1)
    assert (body["logit_bias"], body["stop"]) == ([[5, -2.0]], ["END"])
    plain = request_body(RunConfig(engines="llama-server"), [1, 2, 3], seed=7, max_tokens=32)
    assert plain["samplers"] == SAMPLER_ORDER and plain["repeat_penalty"] == 1.0 and "stop" not in plain


def test_llama_server_takes_its_own_window_and_refuses_output_only_presence():
    cfg = RunConfig(engines="llama-server", presence_penalty=0.5, frequency_penalty=0.5, repeat_last_n=64)
    assert request_features(cfg.sampling, 100)["repeat_last_n"] == 64
    with pytest.raises(InputError, match="add repeat_last_n=N"):
        request_features(RunConfig(engines="llama-server", presence_penalty=0.5).sampling, 100)


def test_endpoint_sends_openai_fields_and_vllm_extensions():
    cfg = RunConfig(
        engines="endpoint",
        endpoint={"vanilla_url": "http://127.0.0.1:1", "speculative_url": "http://127.0.0.1:2", "model": "m"},
        presence_penalty=0.5,
        **FEATURES,
    )
    body = endpoint_body(cfg, {**cfg.engine_settings("endpoint"), "stream": False}, "m", [1, 2], 3, 8)
    assert body["logit_bias"] == {"5": -2.0} and body["stop"] == ["END"]
    assert (body["min_p"], body["repetition_penalty"], body["presence_penalty"]) == (0.1, 1.3, 0.5)
    assert "frequency_penalty" not in body  # unset features are not sent


def test_vllm_sampling_params_carry_the_features():
    params = sampling_kwargs(RunConfig(engines="vllm", frequency_penalty=0.5, repetition_penalty=1.3, stop=("END",)), 1, [2])
    assert (params["repetition_penalty"], params["frequency_penalty"], params["stop"]) == (1.3, 0.5, ["END"])
    assert "logit_bias" not in params and "structured_outputs" not in params
    schema = '{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}'
    assert sampling_kwargs(RunConfig(engines="vllm", grammar=schema), 1, [2])["structured_outputs"] == {"json": json.loads(schema)}
    gbnf = 'root ::= [a-z]+ "."'
    assert sampling_kwargs(RunConfig(engines="vllm", grammar=gbnf), 1, [2])["structured_outputs"] == {"grammar": gbnf}


@pytest.mark.parametrize(
    ("engines", "feature", "message"),
    [
        ("hf-assisted", {"presence_penalty": 0.5}, "--engines hf-assisted cannot apply presence_penalty: transformers' generate"),
        ("llama-cpp", {"min_p": 0.1}, "--engines llama-cpp cannot apply min_p: the in-process engine"),
        ("vllm", {"repeat_last_n": 64, "repetition_penalty": 1.1}, "--engines vllm cannot apply repeat_last_n"),
        ("vllm", {"min_p": 0.1}, "--engines vllm cannot apply min_p: .*refuses min_p and logit_bias with speculative decoding"),
        ("tree", {"repetition_penalty": 1.1}, "--engines tree cannot apply repetition_penalty"),
    ],
)
def test_an_engine_refuses_what_it_cannot_pass_on_in_one_sentence(engines, feature, message):
    with pytest.raises(InputError, match=message):
        RunConfig(engines=engines, **feature)


def test_bad_feature_values_are_one_sentence_from_the_cli(capsys):
    from specaudit.cli import main

    assert main(["audit", "--sampling", "t=1,min_p=2", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "min_p must be in [0, 1)" in err and "Traceback" not in err
