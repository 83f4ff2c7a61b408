"""The identity-draft check on real engines (tiny random models): a correct verifier passes, a
self-test mutant plugged into the speculative engine fails, at greedy and at t=1; an audit with
`--draft target` carries the check into its snapshot and gate."""

import importlib.util

import pytest

from specaudit.cli import main
from specaudit.contracts.snapshot import snapshot_document
from specaudit.contracts.status import CheckStatus
from specaudit.decoding import SamplingSpec
from specaudit.selftest.identity import identity_run

GREEDY, T1 = SamplingSpec(temperature=0.0), SamplingSpec(temperature=1.0)
Q_FLOOR = "specaudit.selftest.mutants:q_floor"
# At greedy no mutant of mutants.py rejects a one-hot q = p; verifying against the T = 1 target
# while drafting greedily (vLLM #9834's class, a field mutant) keeps a draft with chance max p.
T1_TARGET = "specaudit.selftest.field_mutants:target_default_sampling"


@pytest.fixture(scope="module")
def identity_pair(tiny_pair_dir):
    from specaudit.models import load_pair

    return load_pair(str(tiny_pair_dir[0]), "target", device="cpu")


@pytest.fixture(scope="module")
def two_prompts(tiny_texts, prompt_set_factory):
    return prompt_set_factory({pid: tiny_texts[pid] for pid in ("p1", "p2")})


def _row(pair, prompts, engine, spec, verify=None):
    return identity_run(engine, spec, prompts, target=str(pair.target_name), pair=pair, samples=2, max_new_tokens=16, verify=verify)


@pytest.mark.parametrize("spec", [GREEDY, T1], ids=["greedy", "t=1"])
def test_the_reference_engine_keeps_every_draft_of_the_target(identity_pair, two_prompts, spec):
    row = _row(identity_pair, two_prompts, "speculative", spec)
    assert row["verdict"] == CheckStatus.PASS, row["message"]
    assert row["rule"] == "rejection sampling" and row["expected"] == 1.0
    assert row["judged"] >= 8 and row["accepted"] == row["judged"]


@pytest.mark.parametrize(
    ("spec", "mutant"), [(T1, Q_FLOOR), (GREEDY, T1_TARGET)], ids=["q_floor at t=1", "target_default_sampling at greedy"]
)
def test_a_broken_verifier_fails_the_identity_check(identity_pair, two_prompts, spec, mutant):
    row = _row(identity_pair, two_prompts, "speculative", spec, verify=mutant)
    assert row["verdict"] == CheckStatus.FAIL, row["message"]
    assert row["acceptance"] < row["interval_low"] and row["pvalue"] < 0.05
    assert f"accepted {row['accepted']} of {row['judged']}" in row["message"]


@pytest.mark.parametrize("spec", [GREEDY, T1], ids=["greedy", "t=1"])
def test_transformers_assisted_generation_passes(identity_pair, two_prompts, spec):
    row = _row(identity_pair, two_prompts, "hf-assisted", spec)
    assert row["verdict"] == CheckStatus.PASS, row["message"]
    assert row["judged"] >= 8


@pytest.mark.parametrize(("verify", "status", "code"), [(None, CheckStatus.PASS, 0), (Q_FLOOR, CheckStatus.FAIL, 1)])
def test_an_audit_with_the_identity_draft_gets_the_check_in_its_gate(identity_pair, two_prompts, tmp_path, verify, status, code):
    from specaudit.analysis import analyze
    from specaudit.config import RunConfig
    from specaudit.engines import run
    from specaudit.gate import evaluate_gate

    cfg = RunConfig(
        engines=("speculative",), target=identity_pair.target_name, draft="target", samples=2, max_new_tokens=12, warmup=0, verify=verify
    )
    run(cfg, tmp_path, pair=identity_pair, prompt_set=two_prompts, progress=False)
    snapshot = snapshot_document(analyze(tmp_path, pair=identity_pair, equivalence=False, n_boot=10))
    assert snapshot["identity"]["status"] == status
    assert snapshot["identity"]["engines"]["speculative"]["rule"] == "rejection sampling"
    check = next(c for c in evaluate_gate(snapshot).checks if c.name == "identity-draft")
    assert check.status == status and "t=1" in check.message
    assert (evaluate_gate(snapshot).exit_code == 1) == (code == 1)


def test_a_run_with_another_draft_has_no_identity_check(audit_run):
    from specaudit.analysis import analyze
    from specaudit.gate import evaluate_gate

    snapshot = snapshot_document(analyze(audit_run, equivalence=False, n_boot=10, write=False))
    assert snapshot.get("identity") is None
    assert all(c.name != "identity-draft" for c in evaluate_gate(snapshot).checks)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--identity", "--engines", "vanilla"], "--identity cannot run engine(s) vanilla"),
        (["--identity", "--engines", ","], "--engines names no engine"),
        (["--identity", "--samplers", "nope"], "unknown sampler(s) nope"),
        (["--engines", "speculative"], "add --identity"),
    ],
)
def test_bad_identity_flags_are_one_sentence_and_exit_2(flags, words, capsys):
    assert main(["selftest", *flags]) == 2
    assert words in capsys.readouterr().err


def test_llama_cpp_and_llama_server_take_the_target_as_draft():
    from specaudit.config import RunConfig
    from specaudit.engines.llama_cpp_runtime import check_config, draft_gguf, gguf_file
    from specaudit.engines.llama_server.settings import LlamaServerSettings, spec_type_for

    cfg = RunConfig(engines=("llama-cpp",), draft="target")
    check_config(cfg)  # accepted, no InputError
    assert draft_gguf(cfg) == gguf_file("default")
    assert draft_gguf(cfg.replace(draft="ngram")) is None
    assert spec_type_for("target", LlamaServerSettings()) == "draft-simple"  # a draft model, the target's own file


HAVE_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_LLAMA_CPP, reason="llama-cpp-python is not installed (pip install specaudit[llama-cpp])")
def test_llama_cpp_keeps_the_greedy_draft_at_the_rate_max_p_gives(two_prompts):
    """llama.cpp's rule with q = p: max p_t of the drafts at t=1 (the records' position_accept), every
    draft at greedy but those at llama.cpp's batch-shape argmax flips (docs/identity.md: about 2% of
    positions on the embedded GGUF; where they fall depends on the build's kernels, so the greedy
    verdict is the engine's, not asserted here)."""
    greedy = identity_run("llama-cpp", GREEDY, two_prompts, samples=2, max_new_tokens=16)
    sampled = identity_run("llama-cpp", T1, two_prompts, samples=2, max_new_tokens=16)
    assert greedy["rule"] == sampled["rule"] == "greedy match"
    assert greedy["expected"] == pytest.approx(1.0) and sampled["expected"] < 0.99
    assert greedy["judged"] >= 20 and greedy["accepted"] >= 0.95 * greedy["judged"], greedy["message"]
    assert sampled["verdict"] == CheckStatus.PASS, sampled["message"]


@pytest.mark.slow
def test_the_embedded_pair_keeps_every_draft_and_a_mutant_does_not(two_prompts):
    """The embedded SmolLM2 target drafting for itself in the reference engine (float32)."""
    from specaudit.models import load_pair

    pair = load_pair("default", "target", device="cpu")
    rows = {
        (spec.temperature, verify): identity_run(
            "speculative", spec, two_prompts, target="default", pair=pair, samples=2, max_new_tokens=16, verify=verify
        )
        for spec, verify in ((GREEDY, None), (T1, None), (T1, Q_FLOOR))
    }
    for key in ((0.0, None), (1.0, None)):
        assert rows[key]["verdict"] == CheckStatus.PASS, rows[key]["message"]
        assert rows[key]["judged"] >= 8
    assert rows[(1.0, Q_FLOOR)]["verdict"] == CheckStatus.FAIL, rows[(1.0, Q_FLOOR)]["message"]


def test_an_identity_run_that_never_drafted_says_so_in_its_warning():
    """OpenVINO's sampled pipelines after their first fault: records without a single draft. Nothing
    is judged, and the warning names how many records drafted."""
    from specaudit.analysis.identity import identity_section

    records = [
        {
            "key": f"p{i}|speculative|0",
            "prompt_id": f"p{i}",
            "engine": "speculative",
            "proposed": 0,
            "accepted": 0,
            "output_token_ids": [5, 6],
        }
        for i in range(3)
    ]
    section = identity_section(records, {"config": {"draft": "target", "temperature": 1.0}})
    assert section.status == CheckStatus.WARN
    assert (
        section.message
        == "no drafted position was judged (speculative drafted on 0 of 3 records reporting drafts), so the identity draft showed nothing"
    )


def test_an_identity_run_under_penalties_names_them_in_its_failure():
    """vLLM's draft model proposes without the request's penalties (docs/vllm.md finding 5): at
    greedy, identity drafts are rejected where the penalty moves the argmax. The check fails on
    the rule, with the setting's features named, so a reader can tell it from a wrong verifier."""
    from specaudit.analysis.identity import identity_section

    def record(i: int, sampling: dict) -> dict:
        # two steps of 4 drafts: the first keeps 1 (rejects the second), the second keeps all
        return {
            "key": f"p{i}|speculative|0",
            "prompt_id": f"p{i}",
            "engine": "speculative",
            "proposed": 8,
            "accepted": 5,
            "accepted_per_step": [1, 4],
            "proposed_per_step": [4, 4],
            "output_token_ids": list(range(10, 17)),
            "sampling": sampling,
        }

    manifest = {"backend": "vllm", "config": {"draft": "target", "temperature": 0.0}}
    penalised = identity_section([record(i, {"temperature": 0.0, "repetition_penalty": 1.3}) for i in range(12)], manifest)
    assert penalised.status == CheckStatus.FAIL and penalised.sampling == "greedy,repetition_penalty=1.3"
    assert "the requests carry repetition_penalty: an identity draft that proposes without them" in penalised.message
    plain = identity_section([record(i, {"temperature": 0.0}) for i in range(12)], manifest)
    assert plain.status == CheckStatus.FAIL and "the requests carry" not in plain.message and plain.sampling == "greedy"


def test_an_engine_that_faults_instead_of_drafting_fails_its_identity_check(identity_pair, two_prompts):
    """As OpenVINO's sampled pipelines do: every speculative call raises (here the model's forward
    pass, as a runtime's kernel would), nothing is judged, and the row is a FAIL naming the faults,
    not a skip."""

    def failing(module, args):
        raise RuntimeError("planted: the runtime failed")

    handle = identity_pair.target.register_forward_pre_hook(failing)
    try:  # 2 prompts x 2 samples: under the run's limit of 5 faults in a row
        row = _row(identity_pair, two_prompts, "speculative", T1)
    finally:
        handle.remove()
    assert row["verdict"] == CheckStatus.FAIL and row["judged"] == 0 and row["faults"] == 4
    assert row["message"].startswith("nothing judged: 4 engine call(s) failed (first: RuntimeError: planted: the runtime failed)")
