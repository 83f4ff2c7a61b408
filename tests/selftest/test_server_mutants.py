"""The server mutants (specaudit.testing.server_mutants), served by two batching reference servers
on 127.0.0.1 and audited by the endpoint engine at concurrency 1 and 4: each is caught and its
cause named, the correct server names none. The statistics they rest on (independence of outputs
that ran together, acceptance stability) are checked here on data whose answer is known."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from specaudit.analysis.acceptance_stability import acceptance_stability
from specaudit.contracts.run import SPECULATIVE_ENGINE
from specaudit.stats.equivalence.independence import concurrent_independence
from specaudit.testing.server import ReferenceServer
from specaudit.testing.server_mutants import SERVER_MUTANTS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _iid(rng, prompts=8, samples=8, length=6, vocab=3):
    return {f"p{i}": [list(rng.integers(0, vocab, length)) for _ in range(samples)] for i in range(prompts)}


def test_independence_is_calibrated_on_iid_outputs_and_catches_copies():
    rng = np.random.default_rng(0)
    pvalues = [concurrent_independence(_iid(rng), _iid(rng), seed=s, n_permutations=99).pvalue for s in range(60)]
    assert 0.01 <= np.mean(np.array(pvalues) < 0.05) <= 0.15  # alpha = 0.05 over 60 null runs (exact test)
    copies = {p: [outputs[0]] * 4 + outputs[4:] for p, outputs in _iid(rng).items()}  # 4 samples sharing one draw
    result = concurrent_independence(copies, _iid(rng), seed=0)
    assert result.verdict == "FAIL" and result.statistic > 0 and result.n == 8


def _record(prompt, level, index, accepted, proposed, tokens=10):
    return {
        "prompt_id": prompt,
        "engine": SPECULATIVE_ENGINE,
        "concurrency": level,
        "started_at": float(index),
        "accepted": accepted,
        "proposed": proposed,
        "output_token_ids": [1] * tokens,
    }


def _run(accepted_at):
    """8 prompts x 4 samples at levels 1 then 4, in that order; accepted_at(level, index) per record."""
    records, index = [], 0
    for level in (1, 4):
        for p in range(8):
            for _ in range(4):
                accepted = accepted_at(level, index)
                records.append(_record(f"p{p}", level, index, accepted, 8 if accepted is not None else 0))
                records[-1]["accepted"] = accepted or 0
                index += 1
    return records


def test_acceptance_stability_tells_load_from_state():
    rng = np.random.default_rng(1)
    steady = acceptance_stability(_run(lambda level, i: int(rng.integers(3, 7))), n_boot=200, seed=0)
    assert steady.status == "WITHIN" and steady.findings == []
    load = acceptance_stability(_run(lambda level, i: int(rng.integers(3, 7)) if level == 1 else None), n_boot=200, seed=0)
    assert [f.kind for f in load.findings] == ["collapse_under_load"]
    state = acceptance_stability(_run(lambda level, i: int(rng.integers(3, 7)) if i < 12 else None), n_boot=200, seed=0)
    assert [f.kind for f in state.findings] == ["stopped_during_run"]
    assert state.findings[0].level == 1 and "not load" in state.message


def test_the_reference_server_batches_concurrent_requests(tiny_pair):
    from specaudit.engines.http.client import Endpoint

    with ReferenceServer(tiny_pair, speculative=True, max_batch=4) as server:
        endpoint = Endpoint(server.url, setting="speculative_url")
        body = {"prompt": [5, 6, 7, 8], "max_tokens": 12, "seed": 3, "temperature": 1.0}
        alone = endpoint.complete(body)
        answers = [None] * 4
        threads = [threading.Thread(target=lambda i=i: answers.__setitem__(i, endpoint.complete(body))) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        endpoint.close()
    assert server.batcher.largest_batch > 1  # requests shared rounds
    assert all(a.text == alone.text for a in answers)  # a request's tokens do not depend on its batch
    assert alone.acceptance is not None and alone.acceptance.source == "metrics.speculative_decoding"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SERVER_MUTANTS))
def test_each_server_mutant_is_caught_and_named(name, tiny_pair, request):
    from specaudit.prompts import load_prompts
    from specaudit.testing.server_selftest import QUICK_BUDGET, server_audit

    prompts = load_prompts("core", dimensions=["domain"], per_group=1, seed=0)
    audit = server_audit(tiny_pair, prompts, name, seed=0, **QUICK_BUDGET)
    expected = SERVER_MUTANTS[name].caught_by
    if expected is None:
        assert audit["findings"] == []  # the correct server: nothing found
        # two levels: alpha split over three families, and the cache states' batteries a fourth
        assert audit["pooled_alpha"] == pytest.approx(0.05 / (4 if SERVER_MUTANTS[name].prefix_cache else 3))
    else:
        assert expected in audit["findings"], audit["findings"]
    # the gate says it too: wrong logprobs FAIL, lost acceptance WARNs (the output is right),
    # tokens after a stop or outside the grammar FAIL the output invariants
    gate = audit["gate"]
    assert gate["logprob-parity"] == ("FAIL" if expected == "logprob_parity" else "PASS"), gate
    assert gate["output-invariants"] == ("FAIL" if (expected or "").startswith("invariant:") else "PASS"), gate
    assert gate["acceptance-stability"] == ("WARN" if expected in ("acceptance_stopped", "acceptance_collapse") else "PASS"), gate
