"""A real snapshot for report and gate tests: the actual pipeline (runner → analyze) on tiny
random models, six prompts in two groups, once per session (a few seconds).

The prompt set is hostile on purpose: one prompt id and one group name hold HTML, so every
test that renders this snapshot also exercises escaping.
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import pytest
from report_inputs import HOSTILE_GROUP, HOSTILE_ID, HOSTILE_TOKEN, TEXTS


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
