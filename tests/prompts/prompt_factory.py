"""Helpers writing a small, valid prompt set into a folder, to corrupt one way at a time."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

VOCAB_WORDS = {
    "common": ["rock", "bone doctor", "rule", "plant", "old word", "sky"],
    "rare": ["feldspar", "orthopaedist", "statute", "angiosperm", "archaism", "firmament"],
}
DIALECT_GROUPS = ["sae", "aave", "scottish"]
DOMAIN_GROUPS = ["code", "news"]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def small_set_rows(n: int = 6) -> dict[str, list[dict]]:
    """n minimal pairs, n domain prompts per group, n parallel dialect triples."""
    vocabulary = [
        {"id": f"vocab-{i}-{g}", "text": f"Explain what a {VOCAB_WORDS[g][i % 6]} is, in example {i}.",
         "pair_id": f"vocab-{i}", "attributes": {"vocabulary": g}}
        for i in range(n) for g in ("common", "rare")
    ]
    domain = [
        {"id": f"domain-{g}-{i}", "text": f"Write a short {g} item number {i}.", "pair_id": None,
         "attributes": {"domain": g}}
        for g in DOMAIN_GROUPS for i in range(n)
    ]
    dialect = [
        {"id": f"dialect-{i}-{g}", "text": f"[{g}] Tell me about topic {i}.", "pair_id": f"dialect-{i}",
         "attributes": {"dialect": g}}
        for i in range(n) for g in DIALECT_GROUPS
    ]
    return {"vocabulary.jsonl": vocabulary, "domain.jsonl": domain, "dialect.jsonl": dialect}


def write_manifest(folder: Path, min_group_size: int, files: list[str]) -> None:
    lines = [
        "# test set",
        "name: small",
        "version: 3",
        "description: A small test set.",
        "license: CC-BY-4.0",
        f"min_group_size: {min_group_size}",
        "dimensions:",
        "  vocabulary:",
        "    file: vocabulary.jsonl",
        "    groups: [common, rare]",
        "    reference: common",
        "    parallel: true",
        "  domain:",
        "    file: domain.jsonl",
        f"    groups: [{', '.join(DOMAIN_GROUPS)}]",
        "    reference: null",
        "    parallel: false",
        "  dialect:",
        "    file: dialect.jsonl",
        f"    groups: [{', '.join(DIALECT_GROUPS)}]",
        "    reference: sae",
        "    parallel: true",
        "files:",
    ]
    for name in files:
        data = (folder / name).read_bytes()
        rows = sum(1 for line in data.decode("utf-8").splitlines() if line.strip())
        lines += [f"  {name}:", f"    sha256: {hashlib.sha256(data).hexdigest()}", f"    rows: {rows}"]
    (folder / "manifest.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def make_set(folder: Path, n: int = 6, min_group_size: int = 4) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = small_set_rows(n)
    for name, file_rows in rows.items():
        write_jsonl(folder / name, file_rows)
    write_manifest(folder, min_group_size, list(rows))
    return folder
