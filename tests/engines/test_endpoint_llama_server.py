"""The endpoint engine on a llama-server URL: the whole sampling chain is sent (llama-server fills
every field left out from its defaults, min_p 0.05 among them), the answer is read unstreamed with
every token id from `__verbose.tokens`, and logprobs that skip a token are not placed on the
wrong ids. bench/llama_server_v1_repro.py shows each behaviour without specaudit."""

from __future__ import annotations

import pytest

from specaudit.config import RunConfig
from specaudit.engines.endpoint.client import output_tokens, request_body
from specaudit.engines.http.client import Completion, Endpoint
from specaudit.engines.llama_sampling import NEUTRAL_SAMPLING, SAMPLER_ORDER

SETTINGS = {"logprobs": 5, "stream": True, "extra_body": {}}


def _cfg(**options) -> RunConfig:
    return RunConfig(engines="endpoint", endpoint={"speculative_url": "http://a/v1", "vanilla_url": "http://b/v1"}, **options)


def test_llama_server_gets_every_stage_of_its_chain_unstreamed():
    body = request_body(_cfg(), SETTINGS, "m", [1, 2, 3], 7, 8, llama_server=True)
    assert {name: body[name] for name in NEUTRAL_SAMPLING} == NEUTRAL_SAMPLING  # min_p 0, not llama-server's 0.05
    assert body["samplers"] == SAMPLER_ORDER and body["top_k"] == 0 and body["temperature"] == 1.0
    assert body["return_tokens"] is body["verbose"] is True and body["cache_prompt"] is False
    assert "stream" not in body and "stream_options" not in body


def test_llama_server_features_use_its_field_names():
    cfg = _cfg(min_p=0.1, repetition_penalty=1.3)
    body = request_body(cfg, SETTINGS, "m", [1, 2, 3], 7, 8, llama_server=True)
    assert body["min_p"] == 0.1 and body["repeat_penalty"] == 1.3 and "repetition_penalty" not in body
    assert body["samplers"] == ["penalties", *SAMPLER_ORDER, "min_p"]


def test_other_servers_keep_the_openai_request():
    body = request_body(_cfg(), SETTINGS, "m", [1, 2, 3], 7, 8)
    assert body["top_k"] == -1 and body["stream"] is True
    assert not {"samplers", "verbose", "return_tokens", "typical_p"} & set(body)


def _answer(content_ids: list[int], all_ids: list[int]) -> dict:
    content = [{"id": i, "logprob": -0.5, "top_logprobs": [{"id": i, "logprob": -0.5}]} for i in content_ids]
    return {
        "choices": [{"text": "x", "finish_reason": "length", "logprobs": {"content": content}}],
        "usage": {"completion_tokens": len(all_ids)},
        "timings": {"prompt_ms": 12.5, "draft_n": 0},
        "__verbose": {"tokens": all_ids, "stop": True},
    }


def test_ids_come_from_verbose_tokens_and_skipping_logprobs_are_dropped():
    endpoint = Endpoint("http://127.0.0.1:9/v1", setting="endpoint.vanilla_url")
    try:
        # llama-server skips the logprobs entry of 136, whose text ends inside a UTF-8 character
        split = endpoint._merge([_answer([18, 133, 923], [18, 136, 133, 923])], "url", max_tokens=8)
        whole = endpoint._merge([_answer([18, 133, 923], [18, 133, 923])], "url", max_tokens=8)
    finally:
        endpoint.close()
    assert output_tokens(split, 5) == ([18, 136, 133, 923], None)
    ids, logprobs = output_tokens(whole, 5)
    assert ids == [18, 133, 923] and [entry["top"][0][0] for entry in logprobs] == ids


def test_an_unstreamed_answers_first_token_time_is_the_servers_prompt_time():
    from specaudit.engines.http.client import _server_prompt_s

    assert _server_prompt_s([_answer([1], [1])]) == pytest.approx(0.0125)
    assert _server_prompt_s([{"choices": []}]) is None
    assert Completion(text="", finish_reason=None).all_token_ids is None


# ----------------------------------------------------------------------------- against llama-server itself
@pytest.mark.slow  # starts llama-server on the embedded GGUF: a few seconds
def test_llama_server_applies_the_chain_the_request_sends():
    """llama-server's own account of the settings it sampled with (`__verbose.generation_settings`)."""
    from specaudit.engines import llama_build as build
    from specaudit.engines.llama_server.client import server_args
    from specaudit.engines.llama_server.launcher import LlamaServer
    from specaudit.engines.llama_server.settings import LlamaServerSettings
    from specaudit.models._loading import embedded_gguf_path

    binary = build.find_binary()
    if binary is None:
        pytest.skip(f"llama-server is not built for llama-cpp-python {build.binding_version()}: run `specaudit llama-server build`")
    args = server_args(embedded_gguf_path(), LlamaServerSettings(threads=1, ctx_per_slot=256), spec_type=None, draft=None, k=3)
    server = LlamaServer(binary, args, "vanilla", lifetime_s=300).start(timeout_s=300)
    try:
        endpoint = Endpoint(f"{server.base_url}/v1", setting="endpoint.vanilla_url")
        with endpoint:
            (model,) = endpoint.served_models()
            assert endpoint.is_llama_server()
            bare = endpoint._json(endpoint.get_text(f"{server.base_url}/props"), "props")["default_generation_settings"]
            body = request_body(_cfg(), SETTINGS, model, [1, 2, 3, 4], 7, 4, llama_server=True)
            import httpx

            applied = httpx.post(f"{server.base_url}/v1/completions", json=body, timeout=120).json()
    finally:
        server.stop()
    settings = applied["__verbose"]["generation_settings"]
    assert bare.get("params", bare)["min_p"] == pytest.approx(0.05)  # what a request that leaves min_p out gets
    assert settings["min_p"] == 0.0 and settings["top_k"] == 0 and settings["samplers"] == SAMPLER_ORDER
    assert len(applied["__verbose"]["tokens"]) == applied["usage"]["completion_tokens"]
