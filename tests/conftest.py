"""Shared fixtures: tiny real transformers models (seconds) and, for integration tests, the
embedded default pair (SmolLM2-135M-Instruct with its int8 self-draft)."""

from __future__ import annotations

import copy
import json
import os
import warnings
from pathlib import Path

# Tests never reach a hub: set before transformers / huggingface_hub read these at import.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from report_inputs import HOSTILE_GROUP, HOSTILE_ID, HOSTILE_TOKEN, TEXTS  # noqa: E402

# Batch-1 decoding of small models gains little from a second thread, and OpenMP threads that
# wait on each other under any competing load slow the int8 draft down many times over.
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_pair_dir(tmp_path_factory) -> tuple[Path, Path]:
    from specaudit.models import save_tiny_pair

    return save_tiny_pair(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tiny_pair(tiny_pair_dir):
    from specaudit.models import load_pair

    target, draft = tiny_pair_dir
    # bench/gpu.sh sets SPECAUDIT_TEST_DEVICE=cuda to run the engine tests on a GPU.
    return load_pair(str(target), str(draft), device=os.environ.get("SPECAUDIT_TEST_DEVICE", "cpu"))


@pytest.fixture(scope="session")
def reference_servers(tiny_pair):
    """Two real OpenAI-compatible servers of the tiny pair, speculation on and off (their .url)."""
    from specaudit.testing.server import ReferenceServer

    with ReferenceServer(tiny_pair, speculative=True) as speculative, ReferenceServer(tiny_pair) as vanilla:
        yield speculative, vanilla


def make_prompt_set(texts: dict[str, str], attributes: dict[str, dict] | None = None, name: str = "test"):
    """A PromptSet built in memory, for tests that are about decoding rather than prompt loading."""
    from specaudit.prompts._model import Prompt, PromptSet, rows_checksum

    prompts = [Prompt(id=i, text=t, attributes=(attributes or {}).get(i, {"group": "a"})) for i, t in texts.items()]
    return PromptSet(name=name, version=1, checksum=rows_checksum(prompts), source="memory", dimensions={}, prompts=prompts)


TINY_TEXTS = {
    "p1": "Hello there, how are you?",
    "p2": "Write a short poem about rain.",
    "p3": "Explain why the sky is blue.",
    "p4": "List three fruits.",
}


@pytest.fixture(scope="session")
def tiny_texts() -> dict[str, str]:
    return dict(TINY_TEXTS)


@pytest.fixture(scope="session")
def tiny_prompts():
    return make_prompt_set(TINY_TEXTS)


@pytest.fixture(scope="session")
def prompt_set_factory():
    """make_prompt_set for tests in folders with a conftest of their own (`from conftest import` finds theirs)."""
    return make_prompt_set


@pytest.fixture(scope="session")
def tiny_prompts_file(tmp_path_factory) -> Path:
    import json

    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    with open(path, "w") as handle:
        for i, (pid, text) in enumerate(TINY_TEXTS.items()):
            handle.write(json.dumps({"id": pid, "text": text, "attributes": {"group": "a" if i % 2 else "b"}}) + "\n")
    return path


@pytest.fixture(scope="session")
def default_pair():
    """The real default pair: SmolLM2-135M-Instruct target, int8 self-draft, CPU."""
    from specaudit.models import load_pair

    return load_pair("default", "int8", device="cpu")


# ----------------------------------------------------------------------------- a real snapshot
# For the snapshot's consumers (tests/report, tests/gate): the actual pipeline (run → analyze) on
# the tiny models, six prompts in two groups, once per session (a few seconds). The prompt set is
# hostile on purpose: one prompt id and one group name hold HTML, so every test that renders this
# snapshot also exercises escaping.
@pytest.fixture(scope="session")
def audit_run(tmp_path_factory, tiny_pair_dir) -> Path:
    """A run folder with records.jsonl, manifest.json and snapshot.json (gate not yet run)."""
    from specaudit.analysis import analyze
    from specaudit.config import RunConfig
    from specaudit.engines import run

    base = tmp_path_factory.mktemp("report_run")
    prompts = base / "prompts.jsonl"
    with open(prompts, "w", encoding="utf-8") as handle:
        for i, text in enumerate(TEXTS):
            row = {"id": HOSTILE_ID if i == 0 else f"p{i}", "text": text, "attributes": {"style": HOSTILE_GROUP if i % 2 else "plain"}}
            handle.write(json.dumps(row) + "\n")
    target, draft = tiny_pair_dir
    cfg = RunConfig(
        target=str(target),
        draft=str(draft),
        engines="vanilla,speculative,hf-assisted",
        samples=3,
        max_new_tokens=16,
        prompts=str(prompts),
        device="cpu",
        seed=1,
    )
    out = base / "run"
    with warnings.catch_warnings():  # two groups of 3 prompts: the loader warns that groups are small
        warnings.simplefilter("ignore")
        run(cfg, out, progress=False, command="specaudit run --prompts prompts.jsonl (test fixture)")
    analyze(out, n_boot=200)
    return out


@pytest.fixture(scope="session")
def _snapshot_text(audit_run) -> str:
    return (audit_run / "snapshot.json").read_text(encoding="utf-8")


@pytest.fixture
def snapshot(_snapshot_text) -> dict:
    """A fresh, editable copy of the real snapshot, with a hostile token string in the drill-down."""
    data = json.loads(_snapshot_text)
    for part in data.get("disparities", {}).values():
        corrections = (part.get("drilldown") or {}).get("corrections") or []
        if corrections:
            corrections[0]["token"] = HOSTILE_TOKEN
            corrections[0]["example_context"] = "before⟦" + HOSTILE_TOKEN + "⟧\nafter"
    return data


@pytest.fixture
def copy_of():
    return copy.deepcopy


def pytest_collection_modifyitems(config, items):
    """Integration tests (the real default pair) are slow by nature: `-m "not slow"` skips them too.

    Files with integration tests run first, then files with slow tests: a minutes-long test
    taken last leaves the other core idle (`--dist worksteal` balances the rest)."""
    weight: dict[str, int] = {}
    for item in items:
        if item.get_closest_marker("integration") is not None:
            item.add_marker(pytest.mark.slow)
            weight[item.fspath.strpath] = 0
        elif item.get_closest_marker("slow") is not None:
            weight[item.fspath.strpath] = min(weight.get(item.fspath.strpath, 1), 1)
    items.sort(key=lambda item: weight.get(item.fspath.strpath, 2))  # stable: order within a file kept
