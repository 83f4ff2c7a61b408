"""Issue 31's cases run as a user would: `python -m specaudit.cli` in a subprocess, against a tree.

    python bench/hostile.py TREE [TREE ...]   # e.g. an export of the base commit, then this tree

For each case and tree: the exit code, the run's wall time where it matters, and the last line of
stderr (or the gate line that decides). The hostile servers (tests/fuzz/hostile_server.py) run in
this process; each case gets fresh ones. Used for the before/after table of docs/robustness.md.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "tests" / "fuzz"))
sys.path.insert(0, str(HERE))

import hostile_server  # noqa: E402
from hostile_server import HostileServer  # noqa: E402

hostile_server.DRIP_EVERY_S, hostile_server.DRIP_LIMIT = 1.0, 30  # a drip the old client waited out: 30 s

WORK = Path(tempfile.mkdtemp(prefix="hostile-"))
EXAMPLE = HERE / "reports" / "example"


def cli(tree: Path, *argv, timeout: float = 240) -> tuple[int, str, str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "specaudit.cli", *map(str, argv)], cwd=tree, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return 124, "", "(killed at the time limit)", time.perf_counter() - start
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("specaudit: warning:")]
    errors = [line for line in lines if "error" in line]  # the sentence, not a summary line after it
    return done.returncode, done.stdout, (errors or lines or [""])[0], time.perf_counter() - start


def setup() -> dict:
    from specaudit.models import save_tiny_pair

    target, _ = save_tiny_pair(WORK / "tiny")
    prompts = WORK / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"id": f"p{i}", "text": f"hello {i}", "attributes": {"group": "ab"[i % 2]}}) + "\n" for i in range(4))
    )
    return {"target": target, "prompts": prompts}


def endpoint_case(tree, inputs, name, fault, *, stream=False, timeout_s=600.0, gate=False):
    import yaml

    folder = WORK / f"{tree.name}-{name}"
    with HostileServer(fault=fault, after=1 if fault != "oov" else 0) as speculative, HostileServer() as vanilla:
        config = {
            "engines": "endpoint",
            "target": str(inputs["target"]),
            "prompts": str(inputs["prompts"]),
            "samples": 1,
            "max_new_tokens": 8,
            "warmup": 0,
            "endpoint": {
                "speculative_url": speculative.url,
                "vanilla_url": vanilla.url,
                "concurrency": 1,
                "stream": stream,
                "timeout_s": timeout_s,
            },
        }
        (WORK / f"{name}.yaml").write_text(yaml.safe_dump(config))
        code, _, line, wall = cli(tree, "run", "--config", WORK / f"{name}.yaml", "--out", folder, "--quiet")
        kept = len((folder / "records.jsonl").read_text().splitlines()) if (folder / "records.jsonl").exists() else 0
        if gate and code == 0:
            cli(tree, "analyze", folder)
            code_g, out, _, _ = cli(tree, "gate", folder)
            decisive = [x.strip() for x in out.splitlines() if "equivalence[speculative]" in x or "impossible-tokens" in x]
            return f"run {code}; gate {code_g}: " + " / ".join(decisive)
        return f"{code} ({wall:.1f} s, {kept} records kept) {line}"


def main() -> None:
    inputs = setup()
    trees = [Path(t).resolve() for t in sys.argv[1:]]
    store_cases = {}
    for tree in trees:
        print(f"\n## {tree}")
        results = {}
        for name, fault, options in [
            ("oov", "oov", {"gate": True}),
            ("choices_oops", "choices_oops", {}),
            ("string_logprobs", "string_logprobs", {}),
            ("list_top_logprobs", "list_top_logprobs", {}),
            ("redirect_loop", "redirect_loop", {}),
            ("bad_gzip", "bad_gzip", {}),
            ("too_many_tokens", "too_many_tokens", {}),
            ("huge_body", "huge_body", {}),
            ("misaligned", "misaligned", {}),
            ("drip", "drip", {"stream": True, "timeout_s": 3.0}),
            ("drip_headers", "drip_headers", {"timeout_s": 3.0}),
        ]:
            results[name] = endpoint_case(tree, inputs, name, fault, **options)
        store = WORK / f"{tree.name}.db"
        url = f"sqlite:///{store}"
        snap = EXAMPLE / "snapshot.json"
        for flags in (["--min-change", "nan"], ["--cusum-h", "nan"], ["--baseline", "99999"], ["--alpha", "2"]):
            code, _, line, _ = cli(tree, "monitor", "check", snap, "--store", url, *flags)
            stored = sqlite3.connect(store).execute("select count(*) from specaudit_runs").fetchone()[0] if store.exists() else 0
            results[f"monitor check {' '.join(flags)}"] = f"{code} (runs stored: {stored}) {line}"
            if store.exists():
                store.unlink()
        for flags in (["--temperature", "inf"], ["--seed", "99999999999999999999999"], ["--plant-disparity", ""]):
            code, _, line, _ = cli(
                tree,
                "run",
                "--target",
                inputs["target"],
                "--draft",
                inputs["target"],
                "--prompts",
                inputs["prompts"],
                "--out",
                WORK / f"{tree.name}-flag-{flags[0]}",
                "--max-new-tokens",
                4,
                "--quiet",
                *flags,
            )
            results[f"run {' '.join(repr(f) if f == '' else f for f in flags)}"] = f"{code} {line}"
        code, _, line, _ = cli(
            tree,
            "run",
            "--target",
            inputs["target"],
            "--prompts",
            inputs["prompts"],
            "--engines",
            "vanilla",
            "--plant-disparity",
            "group=a:0.5",
            "--out",
            WORK / f"{tree.name}-plantv",
            "--max-new-tokens",
            4,
            "--quiet",
        )
        results["run --engines vanilla --plant-disparity group=a:0.5"] = f"{code} {line}"
        code, _, _, _ = cli(tree, "monitor", "add", snap, "--store", url)
        db = sqlite3.connect(store)
        db.execute("update specaudit_metrics set value = 'abc' where rowid = 1")
        db.commit()
        code, _, line, _ = cli(tree, "monitor", "show", "1", "--store", url)
        results["monitor show, a text metric value"] = f"{code} {line}"
        db.execute("update specaudit_runs set snapshot = '{not json'")
        db.commit()
        for argv in (["show", "1", "--format", "json"], ["check"]):
            code, _, line, _ = cli(tree, "monitor", *argv, "--store", url)
            results[f"monitor {' '.join(argv)}, stored snapshot not JSON"] = f"{code} {line}"
        (WORK / "key.yaml").write_text("1: one\n")
        (WORK / "latin.yaml").write_bytes("target: café\n".encode("latin-1"))
        for cfg in ("key", "latin"):
            code, _, line, _ = cli(tree, "run", "--config", WORK / f"{cfg}.yaml", "--out", WORK / "x")
            results[f"run --config {cfg}.yaml"] = f"{code} {line}"
            code, _, line, _ = cli(tree, "gate", EXAMPLE, "--config", WORK / f"{cfg}.yaml")
            results[f"gate --config {cfg}.yaml"] = f"{code} {line}"
        run_copy = WORK / f"{tree.name}-mitigate-run"
        subprocess.run(["cp", "-r", str(EXAMPLE), str(run_copy)], check=True)
        for flags in (["--learning-rate", "nan"], ["--per-group", "0"], ["--equivalence-prompts", "-1"], ["--timing-prompts", "-3"]):
            out = WORK / f"{tree.name}-mit-{flags[0]}"
            code, _, line, _ = cli(tree, "mitigate", run_copy, "--out", out, "--quick", "--quiet", *flags, timeout=60)
            results[f"mitigate {' '.join(flags)}"] = f"{code} {line}"
        (run_copy / "snapshot.json").write_text('{"schema_version": 1, "groups": ')
        code, _, line, _ = cli(tree, "mitigate", run_copy, "--out", WORK / f"{tree.name}-mit-snap", timeout=60)
        results["mitigate, damaged snapshot.json"] = f"{code} {line}"
        rows = [{"id": f"p{i}", "text": f"a\u2028b {i}", "attributes": {"group": "ab"[i % 2]}} for i in range(4)]
        (WORK / "u2028.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        (WORK / "bom.jsonl").write_text("\ufeff" + "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        (WORK / "deep.jsonl").write_text('{"id": "x", "text": "t", "attributes": ' + "[" * 100000 + "]" * 100000 + "}\n")
        (WORK / "groups.jsonl").write_text(
            "".join(json.dumps({"id": f"p{i}", "text": "t", "attributes": {"g": f"g{i}"}}) + "\n" for i in range(10000))
        )
        for name in ("u2028", "bom", "deep"):
            code, _, line, _ = cli(tree, "prompts", "validate", WORK / f"{name}.jsonl")
            results[f"prompts validate {name}.jsonl"] = f"{code} {line}"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        done = subprocess.run(
            [sys.executable, "-m", "specaudit.cli", "prompts", "stats", str(WORK / "groups.jsonl"), "--tokenizer", "none"],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        results["prompts stats, 10,000 groups"] = f"{done.returncode}, {done.stderr.count('warning:')} warning lines"
        for name, value in results.items():
            print(f"{name}\t{value[:400]}")
        store_cases[str(tree)] = results
    (WORK / "results.json").write_text(json.dumps(store_cases, indent=1))
    print(f"\n{WORK / 'results.json'}")


if __name__ == "__main__":
    main()
