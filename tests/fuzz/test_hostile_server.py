"""Issue 31, case by case: a hostile OpenAI-compatible server (tests/fuzz/hostile_server.py) against
`specaudit run --engines endpoint`, and property tests of the endpoint's response models.

Each malformed answer must end the run with exit 2 and one sentence naming the server's URL, the
request and what was wrong; the records finished before it are kept, and the same command resumes
once the server answers correctly. A server that answers wrongly but well-formed (a token id outside
the vocabulary) is a finding: the audit FAILs, naming the record.
"""

from __future__ import annotations

import json
import math
import os

import pytest
import yaml
from hostile_server import HostileServer
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from specaudit.cli import main
from specaudit.engines.http._responses import CompletionPart, problem
from specaudit.engines.http.client import Endpoint
from specaudit.errors import InputError
from specaudit.execution.records import read_records

pytestmark = [pytest.mark.fuzz, pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

N_PROMPTS = 4  # tiny_prompts_file
# Examples per property test; SPECAUDIT_FUZZ_EXAMPLES=1000 for a deeper search before a release.
EXAMPLES = int(os.environ.get("SPECAUDIT_FUZZ_EXAMPLES", "150"))
MAX_TOKENS = 6


def _run(tmp_path, capsys, speculative: HostileServer, vanilla: HostileServer, *, stream: bool, **endpoint) -> tuple[int, str]:
    config = {
        "engines": "endpoint",
        "target": str(_run.target),
        "prompts": str(_run.prompts),
        "samples": 1,
        "max_new_tokens": MAX_TOKENS,
        "warmup": 0,
        "endpoint": {"speculative_url": speculative.url, "vanilla_url": vanilla.url, "concurrency": 1, "stream": stream, **endpoint},
    }
    path = tmp_path / "endpoint.yaml"
    path.write_text(yaml.safe_dump(config))
    code = main(["run", "--config", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("specaudit: warning:")]
    assert "Traceback" not in err and len(lines) <= 1, err
    return code, (lines[0] if lines else "")


@pytest.fixture(autouse=True)
def _inputs(tiny_pair_dir, tiny_prompts_file):
    _run.target, _run.prompts = tiny_pair_dir[0], tiny_prompts_file


# Each malformed answer, what the sentence must say about it, and whether it is streamed.
MALFORMED = [
    ("choices_oops", False, "choices[0] must be an object, got 'oops'"),
    ("choices_oops", True, "choices[0] must be an object, got 'oops'"),
    ("string_logprobs", False, "token_logprobs[0] must be a number, got 'x'"),
    ("list_top_logprobs", False, "top_logprobs[0] must be a mapping of key: value"),
    ("nan_logprob", True, "a logprob is a number <= 0"),
    ("too_many_tokens", False, "40 tokens for max_tokens 6"),
    ("huge_text", False, "characters of text for at most 6 tokens"),
    ("huge_body", False, "sent more than 1 MiB"),
    ("huge_body", True, "sent more than 1 MiB"),
    ("misaligned", False, "5 token_logprobs for 6 tokens"),
    ("misaligned", True, "5 token_logprobs for 6 tokens"),
    ("redirect_loop", False, "redirected more than 5 times"),
    ("bad_gzip", False, "cannot be decoded"),
    ("drip", True, "did not finish streaming its answer within 1 s"),
    ("drip", False, "did not finish answering within 1 s"),
    ("drip_headers", False, "did not finish answering within 1 s"),
]


@pytest.mark.parametrize("fault, stream, said", MALFORMED, ids=[f"{f}-{'stream' if s else 'plain'}" for f, s, _ in MALFORMED])
def test_malformed_answer_is_one_sentence_keeps_records_and_resumes(tmp_path, capsys, fault, stream, said):
    with HostileServer(fault=fault, after=1) as speculative, HostileServer() as vanilla:
        code, error = _run(tmp_path, capsys, speculative, vanilla, stream=stream, timeout_s=1)
        assert code == 2, error
        assert error.startswith(f"specaudit: error: endpoint.speculative_url {speculative.url}/completions (prompt p"), error
        assert said in error, error
        kept = read_records(tmp_path / "out" / "records.jsonl")
        assert 2 <= len(kept) < 2 * N_PROMPTS  # the first speculative answer and the vanilla ones before the fault
        assert all(len(r["output_token_ids"]) == MAX_TOKENS for r in kept)
        speculative.fault = None  # the server is fixed: the same command resumes
        code, error = _run(tmp_path, capsys, speculative, vanilla, stream=stream, timeout_s=1)
        assert code == 0, error
    records = read_records(tmp_path / "out" / "records.jsonl")
    assert len(records) == 2 * N_PROMPTS and {r["key"] for r in kept} <= {r["key"] for r in records}


@pytest.mark.parametrize("logprobs", [20, 0], ids=["server-logprobs", "local-scoring"])
def test_out_of_vocabulary_token_fails_the_audit_naming_the_record(tmp_path, capsys, logprobs):
    with HostileServer(fault="oov", after=0) as speculative, HostileServer() as vanilla:
        code, error = _run(tmp_path, capsys, speculative, vanilla, stream=False, logprobs=logprobs)
    assert code == 0, error  # the answers are well-formed: they are kept as evidence
    records = read_records(tmp_path / "out" / "records.jsonl")
    bad = [r for r in records if r.get("server_violations")]
    assert {r["engine"] for r in bad} == {"speculative"} and len(bad) == N_PROMPTS
    assert bad[0]["output_token_ids"][0] == 99999
    assert "outside the vocabulary [0, 78)" in bad[0]["server_violations"][0]["problem"]
    if logprobs:
        assert bad[0]["target_logprobs"][0]["token_logprob"] is None  # probability 0: an impossible token
    assert main(["analyze", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    code = main(["gate", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 1
    equivalence = next(line for line in out.splitlines() if "equivalence[speculative]" in line)
    assert equivalence.lstrip().startswith("FAIL") and "token id 99999, outside the vocabulary" in equivalence, out
    assert "|speculative|0 position 0" in equivalence
    assert "PASS  impossible-tokens" not in out
    if logprobs:
        impossible = next(line for line in out.splitlines() if "impossible-tokens" in line)
        assert impossible.lstrip().startswith("FAIL") and "position 0" in impossible, out
    assert main(["report", str(tmp_path / "out")]) == 0  # the report names the server's bug too
    assert "the server returned token id 99999, outside the vocabulary" in (tmp_path / "out" / "summary.md").read_text()


@pytest.mark.parametrize("logprobs", [20, 0], ids=["server-logprobs", "local-scoring"])
def test_out_of_vocabulary_on_both_urls_fails_the_control_not_the_program(tmp_path, capsys, logprobs):
    """Issue 42: both servers (the control too) answer one out-of-vocabulary token per request, so
    nothing is left to test; analyze exited 70 (TypeError in judge_control). A broken control is a finding."""
    with HostileServer(fault="oov", after=0) as speculative, HostileServer(fault="oov", after=0) as vanilla:
        config = {
            "engines": "endpoint",
            "target": str(_run.target),
            "prompts": str(_run.prompts),
            "max_new_tokens": 1,
            "warmup": 0,
            "endpoint": {"speculative_url": speculative.url, "vanilla_url": vanilla.url, "concurrency": 1, "logprobs": logprobs},
        }
        (tmp_path / "endpoint.yaml").write_text(yaml.safe_dump(config))
        assert main(["run", "--config", str(tmp_path / "endpoint.yaml"), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert main(["analyze", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert main(["gate", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    lines = {line.split()[1]: line for line in out.splitlines() if line[:4] in ("PASS", "WARN", "FAIL")}
    assert lines["control[vanilla]"].startswith("FAIL") and "the vanilla server returned impossible output" in lines["control[vanilla]"]
    assert (
        lines["output-invariants"].startswith("FAIL")
        and "vanilla record p1|vanilla|0 position 0: token id 99999" in lines["output-invariants"]
    )


def test_servers_answering_503_in_a_row_stop_the_run_with_one_sentence_and_resume(tmp_path, capsys):
    """Issue 42: 5xx answers are faults, not bad input; 5 in a row (both servers down) stop the run
    with one sentence, exit 2, every fault on file; the servers back, the same command finishes."""
    with HostileServer(fault="http_503", after=1) as speculative, HostileServer(fault="http_503", after=1) as vanilla:
        code, error = _run(tmp_path, capsys, speculative, vanilla, stream=False)
        assert code == 2 and error.startswith("specaudit: error: the ") and "failed on 5 plan items in a row" in error, error
        assert "HTTP 503" in error and "CUDA out of memory (planted)" in error and "faults.jsonl" in error
        assert len(read_records(tmp_path / "out" / "records.jsonl")) == 2  # the first request of each server
        assert len((tmp_path / "out" / "faults.jsonl").read_text().splitlines()) == 5
        speculative.fault = vanilla.fault = None
        code, error = _run(tmp_path, capsys, speculative, vanilla, stream=False)
        assert code == 0, error
    assert len(read_records(tmp_path / "out" / "records.jsonl")) == 2 * N_PROMPTS


def test_two_correct_hostile_servers_pass(tmp_path, capsys):
    """The control of the case above: the same servers without the fault pass the gate's equivalence checks."""
    with HostileServer() as speculative, HostileServer() as vanilla:
        code, error = _run(tmp_path, capsys, speculative, vanilla, stream=True)
    assert code == 0, error
    assert main(["analyze", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    main(["gate", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert any(line.lstrip().startswith("PASS") and "impossible-tokens" in line for line in out.splitlines()), out


# ----------------------------------------------------------------------------- the response models
logprob_values = st.floats(allow_nan=True, allow_infinity=True) | st.none() | st.text(max_size=3) | st.integers(-5, 5)
json_leaf = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats() | st.text(max_size=6)
json_any = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3))
choices = st.fixed_dictionaries(
    {},
    optional={
        "text": st.text(max_size=8) | json_any,
        "finish_reason": st.sampled_from(["stop", "length", None]) | json_any,
        "token_ids": st.lists(st.integers(-3, 100), max_size=4) | json_any,
        "logprobs": st.fixed_dictionaries(
            {},
            optional={
                "tokens": st.lists(st.text(max_size=12), max_size=4) | json_any,
                "token_logprobs": st.lists(logprob_values, max_size=4) | json_any,
                "top_logprobs": st.lists(st.dictionaries(st.text(max_size=12), logprob_values, max_size=3) | st.none(), max_size=4)
                | json_any,
            },
        )
        | json_any,
    },
)
bodies = st.fixed_dictionaries({}, optional={"choices": st.lists(choices | json_any, max_size=2) | json_any, "usage": json_any})


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(bodies)
def test_response_model_accepts_only_well_typed_finite_answers(body):
    """Whatever a server sends: the model either accepts it, and then every field specaudit reads has
    its type (ids >= 0, logprobs finite or -inf and <= 0), or it refuses with one sentence."""
    try:
        part = CompletionPart.model_validate(body)
    except ValidationError as err:
        sentence = problem(err)
        assert sentence and "\n" not in sentence and len(sentence) < 400
        return
    for choice in part.choices or []:
        assert isinstance(choice.text, str)
        assert all(isinstance(i, int) and i >= 0 for i in choice.token_ids or [])
        if choice.logprobs is not None:
            values = list(choice.logprobs.token_logprobs or [])
            values += [v for top in choice.logprobs.top_logprobs or [] if top for v in top.values()]
            for value in values:
                assert value is None or (isinstance(value, float) and not math.isnan(value) and value <= 1e-4)
            assert all(isinstance(t, str) for t in choice.logprobs.tokens or [])


def test_response_model_round_trips_a_correct_answer():
    server = HostileServer()
    answer = json.loads(json.dumps(server.answer({"max_tokens": 5, "seed": 3, "logprobs": 8}, None)))
    server.httpd.server_close()
    part = CompletionPart.model_validate(answer)
    assert len(part.choices[0].logprobs.tokens) == 5 and part.choices[0].finish_reason == "length"


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(st.lists(bodies, min_size=1, max_size=3), st.integers(1, 6))
def test_merged_answers_fit_the_request_or_are_one_sentence(chunks, max_tokens):
    """The chunks of any stream: merged into a completion whose lists are aligned and no longer than
    max_tokens, or refused with one InputError naming the URL (never another exception)."""
    endpoint = Endpoint("http://127.0.0.1:9/v1", setting="endpoint.speculative_url")
    try:
        merged = endpoint._merge(chunks, "http://127.0.0.1:9/v1/completions", "prompt p0, sample 0", max_tokens)
    except InputError as err:
        assert str(err).startswith("endpoint.speculative_url http://127.0.0.1:9/v1/completions") and "\n" not in str(err)
        return
    finally:
        endpoint.close()
    if merged.tokens is not None:
        assert len(merged.tokens) <= max_tokens
        for name in ("token_logprobs", "top_logprobs"):
            assert getattr(merged, name) is None or len(getattr(merged, name)) == len(merged.tokens)
    if merged.token_ids is not None:
        assert len(merged.token_ids) <= max_tokens and all(i >= 0 for i in merged.token_ids)
    assert len(merged.text) <= 1024 * max_tokens
