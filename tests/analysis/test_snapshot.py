"""analyze validates the snapshot against the contract before writing it: a section that breaks
the contract is one sentence, and the snapshot already in the folder is left as it was."""

from __future__ import annotations

import json
import warnings

import pytest

from specaudit.analysis import analyze
from specaudit.config import RunConfig
from specaudit.contracts.run import MANIFEST_FILE
from specaudit.contracts.snapshot import SNAPSHOT_FILE, ModelInfo, RunConfigBlock, Snapshot, read_snapshot, snapshot_document
from specaudit.contracts.status import CheckStatus, EquivalenceStatus
from specaudit.engines import run
from specaudit.errors import InputError


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_pair_dir, tiny_prompts_file):
    target, draft = tiny_pair_dir
    cfg = RunConfig(target=str(target), draft=str(draft), prompts=str(tiny_prompts_file), max_new_tokens=8, device="cpu", seed=2)
    out = tmp_path_factory.mktemp("analysis") / "run"
    with warnings.catch_warnings():  # tiny groups: the prompt-set loader says so
        warnings.simplefilter("ignore")
        run(cfg, out, progress=False)
    return out


def test_the_snapshot_returned_is_the_one_every_reader_reads_from_the_file(run_dir):
    snapshot = analyze(run_dir, n_boot=50)
    on_disk = json.loads((run_dir / SNAPSHOT_FILE).read_text(encoding="utf-8"))
    assert isinstance(snapshot, Snapshot) and read_snapshot(run_dir) == snapshot  # fields, extras and key order alike
    assert on_disk == json.loads(json.dumps(snapshot_document(snapshot)))
    status = snapshot.equivalence.status  # statuses are the contracts' enum members, spelt one way on disk
    assert isinstance(status, (CheckStatus, EquivalenceStatus)) and on_disk["equivalence"]["status"] == str(status)


def test_the_runs_manifest_parts_are_read_as_attributes_and_written_back_as_the_manifest_holds_them(run_dir):
    snapshot = analyze(run_dir, n_boot=50)
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    run = snapshot.run
    assert run.config.samples == manifest["config"]["samples"] and run.config.top_p == manifest["config"]["top_p"]
    assert run.models.target.class_ == manifest["models"]["target"]["class"] and run.models.draft.sha256
    assert run.device.threads == manifest["device"]["threads"] and run.versions.specaudit == manifest["versions"]["specaudit"]
    assert run.seeds.run == manifest["seeds"]["run"] == 2
    written = json.loads(json.dumps(snapshot_document(snapshot)))["run"]
    for part in ("config", "models", "device", "versions", "seeds"):
        assert written[part] == manifest[part]  # nothing added, nothing renamed ("class" stays "class")
    derived = ModelInfo.model_validate({"derived": "int8", "from": "tiny"})
    assert derived.from_ == "tiny" and derived.model_dump(exclude_unset=True) == {"derived": "int8", "from": "tiny"}
    older = RunConfigBlock.model_validate({"target": "t", "tree": "2,2"})  # recorded before the other settings existed
    assert older.samples is None and older.temperature is None  # not recorded: never RunConfig's default
    assert older.as_written() == {"target": "t", "tree": "2,2"}  # an older run's engine key passes through


def test_a_section_that_breaks_the_contract_is_refused_before_anything_is_written(run_dir, monkeypatch):
    analyze(run_dir, n_boot=50)
    before = (run_dir / SNAPSHOT_FILE).read_bytes()
    import specaudit.stats.disparity as disparity

    real = disparity.disparity_section

    def groups_as_a_list(*args, **kwargs):  # a regression in a statistics module: `groups` of the wrong type
        return {**real(*args, **kwargs), "groups": []}

    monkeypatch.setattr(disparity, "disparity_section", groups_as_a_list)
    with pytest.raises(InputError, match="groups must be an object, got a list"):
        analyze(run_dir, n_boot=50)
    assert (run_dir / SNAPSHOT_FILE).read_bytes() == before


def test_groups_are_compared_on_the_rule_with_mean_beta_beside_it_where_the_engine_has_its_own_rule():
    """llama.cpp keeps a greedy draft while the target's draw equals it: groups are compared on its
    rule's acceptance rate first (what decides its users' speed-up, gated), with mean β beside it
    (what rejection sampling would give) when every sampled record the comparison reads carries β;
    rejection-sampling engines compare accepted / proposed alone."""
    import pandas as pd

    from specaudit.analysis.snapshot import compared_acceptance
    from specaudit.contracts.engines import ENGINES

    rule_and_beta, rate = ("acceptance_rate", "mean_beta"), ("acceptance_rate",)
    llama_rule, rejection = ENGINES["llama-cpp"], None  # a run's backend; local engines and specaudit's screen have none
    runs = pd.DataFrame(
        {"engine": ["vanilla", "speculative", "speculative"], "timing_only": [False, False, True], "position_beta": [None, [0.7], None]}
    )
    assert compared_acceptance(runs, llama_rule) == rule_and_beta  # a timing repeat carries no β and does not count
    assert compared_acceptance(runs, rejection) == rate
    assert compared_acceptance(runs.assign(position_beta=[None, None, None]), llama_rule) == rate  # n-gram: no β
    screened = pd.DataFrame({"engine": ["screen", "speculative"], "position_beta": [[0.6, 0.8], None]})
    assert compared_acceptance(screened, llama_rule) == rule_and_beta  # the screen's records are the ones compared
    assert compared_acceptance(screened.drop(columns="position_beta"), llama_rule) == rate
    assert compared_acceptance(screened, rejection) == rate  # specaudit's own screen (the default audit): rejection sampling
    assert compared_acceptance(screened, ENGINES["vllm"]) == rate  # vLLM accepts by rejection sampling
