"""The Ray executor on tiny models and a 2-CPU local Ray cluster: the same records as a local run,
also when a worker actor is killed mid-run; clear errors for impossible requests."""

import json
import sys
import threading
import time

import pytest
import ray  # the test extra installs it

from specaudit.cli import main
from specaudit.config import RunConfig
from specaudit.engines import run
from specaudit.errors import InputError
from specaudit.execution.invariants import check_invariants
from specaudit.execution.records import read_records

pytestmark = pytest.mark.slow

# Everything but timings: what must not depend on where or in how many pieces the plan ran.
OUTPUT_FIELDS = (
    "key",
    "prompt_id",
    "engine",
    "sample",
    "seed",
    "prompt_token_ids",
    "output_token_ids",
    "text",
    "finish_reason",
    "steps",
    "proposed",
    "accepted",
    "accepted_per_step",
    "proposed_per_step",
    "beta",
)


def _config(tiny_pair_dir, prompts, **overrides) -> RunConfig:
    target, draft = tiny_pair_dir
    options = dict(
        target=str(target),
        draft=str(draft),
        engines="vanilla,speculative",
        samples=3,
        max_new_tokens=24,
        prompts=str(prompts),
        device="cpu",
        seed=5,
        temperature=1.0,
    )
    options.update(overrides)
    return RunConfig(**options)


def _outputs(records) -> dict:
    return {r["key"]: tuple(json.dumps(r[f]) for f in OUTPUT_FIELDS) for r in records}


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, tiny_pair_dir, tiny_prompts_file):
    out = tmp_path_factory.mktemp("local")
    run(_config(tiny_pair_dir, tiny_prompts_file), out, progress=False)
    return read_records(out / "records.jsonl")


def test_two_workers_write_the_local_runs_records(tmp_path, tiny_pair_dir, tiny_prompts_file, local_run, ray_cluster):
    cfg = _config(tiny_pair_dir, tiny_prompts_file, executor="ray", workers=2)
    summary = run(cfg, tmp_path / "ray", progress=False)  # run() hands the plan to the Ray executor
    records = read_records(tmp_path / "ray" / "records.jsonl")
    assert summary.written == summary.records == len(records) == len(local_run) == 4 * 2 * 3
    assert len({r["key"] for r in records}) == len(records)
    assert _outputs(records) == _outputs(local_run)
    assert not check_invariants(records) and sum(r["accepted"] for r in records) > 0
    manifest = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert manifest["executor"] == {"kind": "ray", "workers": 2, "shards": 8, "actor_failures": 0}
    assert manifest["models"]["target"]["sha256"] and manifest["decoding"]["seed"] == 5
    # a second invocation resumes: nothing is decoded again
    again = run(cfg, tmp_path / "ray", progress=False)
    assert again.written == 0 and again.skipped == again.records == len(records)


def test_a_killed_worker_loses_and_duplicates_nothing(tmp_path, tiny_pair_dir, tiny_prompts_file, local_run, ray_cluster):
    cfg = _config(tiny_pair_dir, tiny_prompts_file)
    out = tmp_path / "killed"
    outcome: dict = {}

    def execute():
        try:
            outcome["summary"] = run(cfg.replace(executor="ray", workers=2), out, progress=False)
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = err

    thread = threading.Thread(target=execute)
    thread.start()
    killed = None
    deadline = time.monotonic() + 900  # the run's end stops the wait; this bounds only a hung run (loaded: minutes to a first record)
    while killed is None and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
        path = out / "records.jsonl"
        if path.exists() and path.read_text().count("\n") >= 1:  # workers are decoding: kill one mid-run
            names = sorted(n for n in ray.util.list_named_actors() if n.startswith("specaudit-"))
            if names:
                killed = names[0]
                ray.kill(ray.get_actor(killed))
    thread.join(timeout=120)
    assert killed is not None and not thread.is_alive() and "error" not in outcome, outcome
    records = read_records(out / "records.jsonl")
    assert len(records) == len({r["key"] for r in records}) == len(local_run)
    assert _outputs(records) == _outputs(local_run)
    assert json.loads((out / "manifest.json").read_text())["executor"]["actor_failures"] >= 1


def test_missing_ray_and_shard_are_one_sentence_errors(tmp_path, tiny_pair_dir, tiny_prompts_file, monkeypatch, capsys):
    target, draft = tiny_pair_dir
    argv = [
        "run",
        "--target",
        str(target),
        "--draft",
        str(draft),
        "--prompts",
        str(tiny_prompts_file),
        "--out",
        str(tmp_path / "x"),
        "--executor",
        "ray",
        "--quiet",
    ]
    assert main([*argv, "--shard", "0/2"]) == 2
    assert "--shard and --executor ray" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the ray extra were not installed
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "pip install 'specaudit[ray]'" in err and "Traceback" not in err
    with pytest.raises(InputError, match="^workers must be an integer >= 1"):  # the Python API names the field, a flag its flag
        _config(tiny_pair_dir, tiny_prompts_file, executor="ray", workers=0)
    with pytest.raises(InputError, match="backend in --engines runs on its own"):
        _config(tiny_pair_dir, tiny_prompts_file, executor="ray", engines="vllm")


def test_a_model_that_does_not_load_on_the_workers_is_an_input_error(tmp_path, tiny_pair_dir, tiny_prompts_file, ray_cluster):
    cfg = _config(tiny_pair_dir, tiny_prompts_file, target=str(tmp_path / "no-such-model"))
    with pytest.raises(InputError, match="no-such-model") as caught:
        run(cfg.replace(executor="ray", workers=1), tmp_path / "bad", progress=False)
    assert "Traceback" not in str(caught.value) and not (tmp_path / "bad" / "records.jsonl").exists()


def test_a_prompt_over_the_context_is_refused_before_any_worker_decodes(tmp_path, tiny_pair_dir, ray_cluster):
    prompts = tmp_path / "p.jsonl"
    rows = [
        {"id": "short", "text": "Hello there.", "attributes": {"group": "a"}},
        {"id": "long-one", "text": "word " * 200, "attributes": {"group": "a"}},
    ]
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(InputError, match=r"prompt 'long-one' is 1000 tokens; .* exceeds the model's context of 512 tokens"):
        run(_config(tiny_pair_dir, prompts, executor="ray", workers=1), tmp_path / "o", progress=False)
    records = tmp_path / "o" / "records.jsonl"
    assert not records.exists() or read_records(records) == []  # not even the short prompt's
