"""Readable group names: from the prompt set's manifest (`labels:`), through the run's manifest and
the snapshot, into summary.md and the report; a label for a group the dimension lacks is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from specaudit.errors import InputError
from specaudit.prompts import load_prompts
from specaudit.prompts._manifest import read_manifest
from specaudit.report.exports import summary_markdown
from specaudit.report.view import build_view

CORE = Path(__file__).resolve().parents[2] / "prompt_sets" / "core"


def test_core_names_its_codes_and_runs_record_them():
    entry = load_prompts("core").manifest_entry()["dimensions"]
    assert entry["dialect"]["labels"]["naija"] == "Nigerian Pidgin"
    assert entry["dialect"]["labels"]["sae"] == "Standard American English"
    assert entry["language"]["labels"]["sw"] == "Swahili"
    assert "labels" not in entry["domain"]  # readable already: no labels needed


def test_summary_and_report_list_the_names(snapshot):
    snapshot = dict(snapshot)
    snapshot["run"] = {
        **snapshot["run"],
        "prompt_set": {"dimensions": {"dialect": {"groups": ["sae", "naija"], "labels": {"naija": "Nigerian Pidgin"}}}},
    }
    view = build_view(snapshot)
    assert view["group_names"] == [("dialect", "naija", "Nigerian Pidgin")]
    text = summary_markdown(view)
    assert "## Group names" in text and "| dialect | `naija` | Nigerian Pidgin |" in text
    assert "## Glossary" in text and "| α |" in text and "β̄ (mean acceptance)" in text


def test_a_label_for_an_unknown_group_is_refused(tmp_path):
    shutil.copytree(CORE, tmp_path / "core")
    path = tmp_path / "core" / "manifest.yaml"
    data = yaml.safe_load(path.read_text())
    data["dimensions"]["dialect"]["labels"]["klingon"] = "Klingon"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError, match="labels.*klingon"):
        read_manifest(path)
