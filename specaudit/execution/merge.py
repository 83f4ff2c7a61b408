"""Splitting a run into shards and merging shard outputs (Slurm arrays, Kubernetes Jobs, ...).

A prompt's shard depends only on its id (a stable hash), so all engines and samples of a prompt
land in the same shard and its paired timings stay on one machine (the hash: specaudit.execution.plan.shard_of).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from specaudit._files import check_output_folder, write_atomic, write_json_atomic
from specaudit.contracts.run import FAULTS_FILE
from specaudit.errors import InputError
from specaudit.execution.faults import read_faults
from specaudit.execution.plan import shard_of  # noqa: F401 - importable from here, as before
from specaudit.execution.records import MANIFEST_FILE, RECORDS_FILE, RecordWriter, load_records, read_manifest


def parse_shard(text: str) -> tuple[int, int]:
    """'i/N' with 0 <= i < N."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit()) or not 0 <= int(index) < int(count):
        raise InputError(f"--shard {text!r}: write i/N with 0 <= i < N, e.g. 0/4")
    return int(index), int(count)


def merge_runs(out_dir: str | Path, run_dirs: list[str | Path]) -> int:
    """Combine shard folders into `out_dir`; refuse when their settings or prompts differ, or
    when two shards hold the same record. Returns the number of records written."""
    from specaudit.execution.folder import folder_lock  # the run package imports this module's neighbours, not it

    out_dir = Path(out_dir)
    if not run_dirs:
        raise InputError("merge needs at least one run folder")
    check_output_folder(out_dir)
    if (out_dir / RECORDS_FILE).exists():
        raise InputError(f"{out_dir / RECORDS_FILE} already exists; merge into a new folder")
    with folder_lock(out_dir):
        return _merge_into(out_dir, [Path(d) for d in run_dirs])


def _merge_into(out_dir: Path, run_dirs: list[Path]) -> int:
    manifests = [read_manifest(d) for d in run_dirs]
    first = manifests[0]
    for directory, manifest in zip(run_dirs[1:], manifests[1:]):
        for section in ("decoding", "prompt_set_checksum", "models"):
            if manifest.get(section) != first.get(section):
                raise InputError(f"{directory} was run with different {section} than {run_dirs[0]}; only shards of one run can be merged")
    owner: dict[str, Path] = {}
    merged = []
    faults = []  # every shard's engine faults, placed among the merged records as among its own
    for directory in run_dirs:
        faults += [replace(f, records_before=f.records_before + len(merged)) for f in read_faults(directory)]
        for record in load_records(directory / RECORDS_FILE):
            if record.key in owner:
                raise InputError(f"record {record.key!r} is in both {owner[record.key]} and {directory}; were shards overlapping?")
            owner[record.key] = directory
            merged.append(record)
    staging = out_dir / f".{RECORDS_FILE}.tmp"  # records appear complete or not at all
    with RecordWriter(staging) as writer:
        for record in merged:
            writer.write(record)
    staging.replace(out_dir / RECORDS_FILE)
    if faults:
        write_atomic(out_dir / FAULTS_FILE, "".join(json.dumps(f.to_json(), ensure_ascii=False) + "\n" for f in faults))
    manifest = dict(first)
    manifest["shard"] = None
    manifest["merged_from"] = [{"dir": str(d), "shard": m.get("shard")} for d, m in zip(run_dirs, manifests)]
    write_json_atomic(out_dir / MANIFEST_FILE, manifest)
    return len(merged)
