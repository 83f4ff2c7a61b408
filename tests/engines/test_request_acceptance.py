"""Per-request acceptance parsers (specaudit.engines.request_acceptance), on response bodies shaped
as the servers' sources and docs show them (cited in the module)."""

from __future__ import annotations

import pytest

from specaudit.engines.request_acceptance import (
    llama_server_acceptance,
    request_acceptance,
    sglang_acceptance,
    vllm_acceptance,
)
from specaudit.errors import InputError

# llama-server's /completion final chunk (server_task_result_cmpl_final::to_json_non_oaicompat,
# timings from server_slot_stats::to_json): draft_n only when something was drafted.
LLAMA_SERVER_BODY = {
    "content": " rain falls",
    "tokens": [1, 2, 3],
    "stop": True,
    "stop_type": "limit",
    "timings": {
        "cache_n": 0,
        "prompt_n": 12,
        "prompt_ms": 30.5,
        "predicted_n": 16,
        "predicted_ms": 210.0,
        "draft_n": 24,
        "draft_n_accepted": 9,
    },
}
# vLLM --per-request-spec-decode-metrics summary (vLLM PR #48915, as quoted in llama-swap #1032).
VLLM_BODY = {
    "choices": [{"text": "..."}],
    "usage": {"completion_tokens": 53},
    "metrics": {
        "speculative_decoding": {
            "mean_acceptance_length": 1.2325581395348837,
            "draft_acceptance_rate": 0.07751937984496124,
            "acceptance_histogram": [39, 1, 0, 3],
            "num_spec_steps": 43,
            "num_accepted_draft_tokens": 10,
            "num_draft_tokens": 129,
            "num_spec_tokens": 3,
        }
    },
}
# SGLang /generate meta_info (tokenizer_manager._calculate_spec_decoding_metrics), three releases.
SGLANG_OLD = {
    "text": "x",
    "meta_info": {
        "spec_verify_ct": 10,
        "spec_accept_rate": 0.4,
        "spec_accept_length": 2.2,
        "spec_accept_token_num": 12,
        "spec_draft_token_num": 30,
    },
}
SGLANG_MID = {"meta_info": {"spec_verify_ct": 10, "spec_accept_rate": 0.4, "spec_accepted_drafts": 12, "spec_proposed_drafts": 30}}
SGLANG_NEW = {"meta_info": {"spec_verify_ct": 10, "spec_accept_rate": 0.4, "spec_num_correct_drafts": 12, "spec_num_proposed_drafts": 30}}


def test_llama_server_timings_give_proposed_and_accepted():
    found = llama_server_acceptance(LLAMA_SERVER_BODY)
    assert (found.proposed, found.accepted, found.source) == (24, 9, "timings.draft_n")
    assert found.acceptance_rate == pytest.approx(9 / 24)


def test_llama_server_without_draft_fields_reports_nothing():
    body = {**LLAMA_SERVER_BODY, "timings": {k: v for k, v in LLAMA_SERVER_BODY["timings"].items() if not k.startswith("draft")}}
    assert llama_server_acceptance(body) is None
    assert request_acceptance(body) is None


def test_vllm_metrics_with_consistent_histogram():
    found = vllm_acceptance(VLLM_BODY)
    # num_spec_steps counts the steps that drafted, not the target's passes: the record's steps stay unobserved
    assert (found.proposed, found.accepted, found.drafted_steps, found.steps) == (129, 10, 43, None)
    assert found.histogram == [39, 1, 0, 3]
    assert found.rate == pytest.approx(0.0775, abs=1e-4)
    assert request_acceptance(VLLM_BODY) == found


def test_vllm_histogram_that_disagrees_with_its_counts_is_a_finding():
    spec = dict(VLLM_BODY["metrics"]["speculative_decoding"], num_accepted_draft_tokens=11)
    with pytest.raises(InputError, match="acceptance_histogram adds up to 10"):
        vllm_acceptance({"metrics": {"speculative_decoding": spec}})


@pytest.mark.parametrize("body", [SGLANG_OLD, SGLANG_MID, SGLANG_NEW], ids=["token_num", "drafts", "num_drafts"])
def test_sglang_counts_under_each_release_name(body):
    found = sglang_acceptance(body)
    assert (found.proposed, found.accepted, found.steps, found.rate) == (30, 12, 10, 0.4)


def test_sglang_rate_only():
    found = sglang_acceptance({"meta_info": {"spec_verify_ct": 5, "spec_accept_rate": 0.25}})
    assert (found.proposed, found.accepted, found.rate, found.acceptance_rate) == (None, None, 0.25, 0.25)


def test_sglang_without_speculation_reports_nothing():
    assert sglang_acceptance({"meta_info": {"completion_tokens": 4}}) is None


@pytest.mark.parametrize(
    "body, message",
    [
        ({"timings": {"draft_n": 3, "draft_n_accepted": 4}}, "cannot accept more drafts than it proposed"),
        ({"timings": {"draft_n": -1}}, "not a count"),
        ({"timings": {"draft_n": 2.5}}, "not a count"),
        ({"meta_info": {"spec_accept_rate": 1.5}}, "not a rate"),
        ({"metrics": {"speculative_decoding": {"num_draft_tokens": "many", "num_accepted_draft_tokens": 1}}}, "not a count"),
    ],
)
def test_impossible_fields_are_one_sentence(body, message):
    with pytest.raises(InputError, match=message):
        request_acceptance(body)


def test_the_endpoint_client_keeps_a_streamed_answers_acceptance():
    from specaudit.engines.http.client import Endpoint

    chunks = [
        {"choices": [{"text": "a", "finish_reason": None}]},
        {"choices": [{"text": "b", "finish_reason": "length"}]},
        {"choices": [], "usage": {"completion_tokens": 2}, "metrics": VLLM_BODY["metrics"]},
    ]
    with Endpoint("http://127.0.0.1:9", setting="endpoint.speculative_url") as endpoint:
        merged = endpoint._merge(chunks, "http://127.0.0.1:9/completions")
    assert merged.text == "ab" and (merged.acceptance.proposed, merged.acceptance.accepted) == (129, 10)
