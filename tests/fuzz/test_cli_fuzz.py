"""Property-based fuzzing of the real CLI, in process, with hostile inputs.

Whatever the input: the exit code is 0, 1 or 2 (never 70, an internal error, and never a
traceback), and files already written (a snapshot, a run's records) are unchanged afterwards.
No model is loaded: the commands fuzzed here read snapshots, prompt files, configs and records.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from cli_in_process import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "reports" / "example"
# About 35 s in the normal suite; SPECAUDIT_FUZZ_EXAMPLES=500 for a deeper search before a release.
EXAMPLES = int(os.environ.get("SPECAUDIT_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None)

pytestmark = [pytest.mark.fuzz, pytest.mark.slow]

# JSON values of any shape, small: what a damaged or hostile file may hold in any field.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def assert_clean(code: int, stderr: str, argv) -> None:
    assert code in (0, 1, 2), f"exit {code} for {argv}: {stderr[-800:]}"
    assert "Traceback" not in stderr, f"traceback for {argv}: {stderr[-800:]}"


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """A small real run folder: a slice of the example run (its manifest and 12 records), no model needed."""
    folder = tmp_path_factory.mktemp("run")
    shutil.copy(EXAMPLE / "manifest.json", folder / "manifest.json")
    lines = (EXAMPLE / "records.jsonl").read_text().splitlines()
    (folder / "records.jsonl").write_text("\n".join(lines[:12]) + "\n")
    return folder


@pytest.fixture(scope="module")
def example_snapshot() -> dict:
    """Today's snapshot (reports/example), its long drill-down lists cut so each example runs in milliseconds."""
    snapshot = json.loads((EXAMPLE / "snapshot.json").read_text())
    snapshot["prompts"] = snapshot["prompts"][:3]
    for block in snapshot["disparities"].values():
        for name, value in list(block.get("drilldown", {}).items()):
            if isinstance(value, list):
                block["drilldown"][name] = value[:3]
    return snapshot


# ------------------------------------------------------------------------------------- snapshots
def _damage(snapshot: dict, data) -> dict:
    """The snapshot with one section (or one field inside one) replaced, dropped or re-typed."""
    damaged = json.loads(json.dumps(snapshot))
    section = data.draw(st.sampled_from(sorted(damaged)), label="section")
    how = data.draw(st.sampled_from(["replace", "drop", "inner"]), label="how")
    if how == "drop":
        del damaged[section]
    elif how == "inner" and isinstance(damaged[section], dict) and damaged[section]:
        key = data.draw(st.sampled_from(sorted(damaged[section])), label="key")
        damaged[section][key] = data.draw(json_values, label="value")
    else:
        damaged[section] = data.draw(json_values, label="value")
    return damaged


@FUZZ
@given(data=st.data())
def test_gate_and_report_on_damaged_snapshots(tmp_path_factory, example_snapshot, data):
    folder = tmp_path_factory.mktemp("snap")
    path = folder / "snapshot.json"
    raw = data.draw(st.sampled_from(["damaged", "text"]), label="kind")
    if raw == "text":
        path.write_text(data.draw(st.text(max_size=60), label="text"))
    else:
        path.write_text(json.dumps(_damage(example_snapshot, data)))
    before = digests(folder)
    for argv in (("gate", path), ("report", path, "--out", folder / "report")):
        code, err = run_cli(*argv)
        assert_clean(code, err, argv)
    assert digests(folder) == before  # the report went to its own folder; the snapshot is untouched


@settings(FUZZ, max_examples=max(15, EXAMPLES // 3))
@given(version=json_values)
def test_a_foreign_schema_version_never_passes_the_gate(tmp_path_factory, example_snapshot, version):
    path = tmp_path_factory.mktemp("ver") / "snapshot.json"
    path.write_text(json.dumps({**example_snapshot, "schema_version": version}))
    code, err = run_cli("gate", path)
    assert_clean(code, err, version)
    if version != 1 or isinstance(version, bool):
        assert code == 2 and "schema_version" in err


# --------------------------------------------------------------------------------- gate configs
config_keys = st.sampled_from(
    [
        "gate",
        "analysis",
        "alpha",
        "tv_delta",
        "band_low",
        "band_high",
        "min_speedup",
        "min_group_size",
        "disparity_metrics",
        "tv_severity",
        "k",
        "gat",
        "thresholds",
    ]
) | st.text(max_size=8)


@FUZZ
@given(config=st.dictionaries(config_keys, json_values | st.dictionaries(config_keys, json_values, max_size=4), max_size=4))
def test_gate_configs(tmp_path_factory, example_snapshot, config):
    folder = tmp_path_factory.mktemp("cfg")
    (folder / "snapshot.json").write_text(json.dumps(example_snapshot))
    (folder / "gate.yaml").write_text(yaml.safe_dump(config))
    before = digests(folder)
    code, err = run_cli("gate", folder, "--config", folder / "gate.yaml")
    assert_clean(code, err, config)
    assert digests(folder) == before
    shutil.rmtree(folder)  # hundreds of examples: keep the temporary folder small
    from specaudit.config import RUN_OPTIONS

    unknown = set(config) - {"gate", "analysis", "out", *RUN_OPTIONS}
    if unknown:  # only run options, `analysis:` and `gate:` belong at the top
        assert code == 2


# --------------------------------------------------------------------------------- prompt files
prompt_rows = st.fixed_dictionaries(
    {},
    optional={
        "id": json_values,
        "text": json_values | st.text(max_size=40),
        "attributes": json_values
        | st.dictionaries(st.sampled_from(["group", "domain", ""]), json_values | st.text(max_size=6), max_size=2),
        "pair_id": json_values,
    },
)


@FUZZ
@given(rows=st.lists(prompt_rows | json_values, max_size=6), torn=st.text(max_size=20), suffix=st.sampled_from([".jsonl", ".json", ".csv"]))
def test_prompt_files(tmp_path_factory, rows, torn, suffix):
    path = tmp_path_factory.mktemp("prompts") / f"prompts{suffix}"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n" + torn)
    for argv in (("prompts", "validate", path), ("prompts", "stats", path, "--tokenizer", "none")):
        code, err = run_cli(*argv)
        assert_clean(code, err, (argv, rows, torn))


# ------------------------------------------------------------------------------------ records
@settings(FUZZ, max_examples=max(12, EXAMPLES // 3))
@given(data=st.data())
def test_analyze_on_damaged_record_lines(tmp_path_factory, run_folder, data):
    """Lines of records.jsonl replaced by garbage, by JSON that is not a record, or cut short."""
    folder = tmp_path_factory.mktemp("records")
    shutil.copy(run_folder / "manifest.json", folder)
    lines = (run_folder / "records.jsonl").read_text().splitlines()
    index = data.draw(st.integers(0, len(lines) - 1), label="line")
    lines[index] = data.draw(
        st.sampled_from(["garbage", "json", "cut"]).flatmap(
            lambda how: {
                "garbage": st.text(max_size=30),
                "json": json_values.filter(lambda v: not (isinstance(v, dict) and "key" in v)).map(json.dumps),
                "cut": st.integers(1, 200).map(lambda n, line=lines[index]: line[:n]),
            }[how]
        ),
        label="damaged line",
    )
    (folder / "records.jsonl").write_text("\n".join(lines) + "\n")
    before = digests(folder)
    argv = ("analyze", folder, "--no-equivalence", "--n-boot", "10")
    code, err = run_cli(*argv)
    assert_clean(code, err, (index, lines[index][:200]))
    after = digests(folder)
    assert {k: after.get(k) for k in before} == before  # records and manifest untouched (snapshot.json may be new)


# ---------------------------------------------------------------------------------- CLI flags
numbers = st.sampled_from(["0", "-1", "1", "0.5", "5", "1e309", "nan", "-0", "", "x", "1,2", "0.8,1.25", "2,0.5"])
flag_sets = {
    "gate": ["--config", "--write"],
    "report": ["--out"],
    "analyze": ["--alpha", "--delta", "--n-boot", "--band", "--fallback-threshold", "--analyze-dimensions"],
    "monitor list": ["--limit", "--format", "--tag"],
    "monitor show": ["--format"],
}


@FUZZ
@given(data=st.data())
def test_flags(tmp_path_factory, example_snapshot, run_folder, data):
    folder = tmp_path_factory.mktemp("flags")
    (folder / "snapshot.json").write_text(json.dumps(example_snapshot))
    run = folder / "run"
    shutil.copytree(run_folder, run)
    command = data.draw(st.sampled_from(sorted(flag_sets)), label="command")
    argv = command.split()
    if command == "analyze":  # no model (equivalence would load the run's target); a fuzzed --n-boot overrides 10
        argv += ["--no-equivalence", "--n-boot", "10"]
    chosen = data.draw(st.lists(st.sampled_from(flag_sets[command]), max_size=3, unique=True), label="flags")
    for flag in chosen:
        if flag in ("--write",):
            argv.append(flag)
        else:
            argv += [flag, data.draw(numbers | st.text(max_size=6).filter(lambda s: not s.startswith("-")), label=flag)]
    target = {"gate": folder, "report": folder, "analyze": run}.get(command)
    if target is not None:
        argv.insert(1, str(target))
    if command.startswith("monitor"):
        argv += ["--store", f"sqlite:///{folder / 'history.db'}"]
        if command == "monitor show":
            argv.insert(2, data.draw(st.sampled_from(["latest", "1", "x"]), label="run"))
    before = digests(run)
    with contextlib.chdir(folder):  # a fuzzed relative --out lands in the temporary folder
        code, err = run_cli(*argv)
    assert_clean(code, err, argv)
    after = digests(run)
    assert {k: after.get(k) for k in before} == before
