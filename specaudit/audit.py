"""audit: run → analyze → report → gate in one call (what `specaudit audit` does)."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from specaudit.config import AnalysisSettings, RunConfig
from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.errors import InputError

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import Snapshot
    from specaudit.models import ModelPair

# Budgets for the embedded default on a 2-core CPU. The screen measures acceptance on every
# sampled prompt (per_group of each group; whole pairs in parallel dimensions); the engines decode
# a stratified subset for exactness and the timings behind the cost model (docs/screen.md).
AUDIT_ENGINES = ("screen", CONTROL_ENGINE, SPECULATIVE_ENGINE)
DEFAULT_BUDGET = {"engines": AUDIT_ENGINES, "per_group": 10, "max_new_tokens": 32}
QUICK_BUDGET = {"engines": AUDIT_ENGINES, "per_group": 3, "max_new_tokens": 32, "engine_prompts": 8}
# Budgets of `audit --pair NAME` (a named real pair, specaudit.models): the screen beside llama.cpp
# (plain decoding of every sampled prompt with the acceptance expected along it), and llama.cpp's
# own plain and speculative decoding of a stratified subset for exactness and the cost model, which
# is how such a pair runs on CPUs; over the five dimensions the draft's training decides, --quick
# the language dimension alone. docs/real-pair.md has the costs.
PAIR_DIMENSIONS = ("language", "task", "domain", "dialect", "vocabulary")
PAIR_BUDGET = {
    "engines": ("screen", "llama-cpp"),
    "dimensions": PAIR_DIMENSIONS,
    "per_group": 10,
    "engine_prompts": 16,
    "max_new_tokens": 16,
}
PAIR_QUICK_BUDGET = {**PAIR_BUDGET, "dimensions": ("language",), "per_group": 8, "engine_prompts": 8}


def pair_budget(name: str, *, quick: bool) -> dict:
    """The run options of `audit --pair NAME`: the pair's models and its budget."""
    from specaudit.models._named import NAMED_PAIRS

    if name not in NAMED_PAIRS:
        raise InputError(f"--pair {name!r} is not a named pair; the named pairs are: {', '.join(NAMED_PAIRS)} (`specaudit models list`)")
    target, draft = NAMED_PAIRS[name]
    return {**(PAIR_QUICK_BUDGET if quick else PAIR_BUDGET), "target": target, "draft": draft}


@dataclass(frozen=True)
class AuditResult:
    out_dir: Path
    snapshot: Snapshot  # the typed snapshot with its gate, as snapshot.json reads back
    files: dict
    gate_status: str
    exit_code: int
    decision: str  # the report's decision (a gate.results.DECISIONS key); the exit code follows it (fail_on)
    resumed: int = 0  # records already in the folder when this invocation began (a resumed run)
    decoded: int = 0  # records this invocation added


def default_run_id(cfg: RunConfig) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    names = "-".join(Path(str(x)).name for x in (cfg.target, cfg.draft) if x)
    return f"{stamp}_{re.sub(r'[^A-Za-z0-9_.:-]+', '_', names).replace(':', '')}"


def audit(
    cfg: RunConfig,
    out_dir: str | Path,
    *,
    analysis: dict | None = None,
    gate: dict | None = None,
    pair: ModelPair | None = None,
    progress: bool = True,
    command: str | None = None,
) -> AuditResult:
    from specaudit._files import check_output_folder, write_json_atomic
    from specaudit.analysis import analyze
    from specaudit.contracts.snapshot import SNAPSHOT_FILE, snapshot_document, with_gate
    from specaudit.engines import run
    from specaudit.engines.decode import load_pair_for
    from specaudit.execution.faults import FaultLimitReached
    from specaudit.gate import evaluate_gate, load_thresholds
    from specaudit.report import render_report

    settings = AnalysisSettings.parse(analysis or {})  # impossible settings fail before any decoding
    thresholds = load_thresholds(gate or {})
    out_dir = Path(out_dir)
    check_output_folder(out_dir, create=False)  # an --out that cannot be written fails before the models load
    pair = pair or load_pair_for(cfg)
    before = _records_in(out_dir)
    try:
        run(cfg, out_dir, pair=pair, progress=progress, command=command)
    except FaultLimitReached as stopped:  # the engine is down: what it answered is audited, its faults FAIL the gate
        warnings.warn(str(stopped), stacklevel=2)
    snapshot = analyze(out_dir, pair=pair, settings=settings)  # typed, validated once
    result = evaluate_gate(snapshot, thresholds)
    snapshot = with_gate(snapshot, result.to_dict())  # the gate section alone is validated
    write_json_atomic(out_dir / SNAPSHOT_FILE, snapshot_document(snapshot))
    files = render_report(snapshot, out_dir)
    return AuditResult(out_dir, snapshot, files, result.status, result.exit_code, result.decision, before, _records_in(out_dir) - before)


def _records_in(out_dir: Path) -> int:
    """Records a run folder holds (0 for a new one)."""
    from specaudit.contracts.run import RECORDS_FILE
    from specaudit.execution.records import read_records

    path = out_dir / RECORDS_FILE
    return len(read_records(path)) if path.is_file() else 0


def last_run_folder(runs_folder: str | Path) -> Path:
    """The run folder under `runs_folder` started last (by its manifest's creation time): what
    `audit --resume` continues when no RUN_DIR is named. A finished one (snapshot written) is
    refused: resuming it would only analyse it again."""
    from specaudit.contracts.run import MANIFEST_FILE
    from specaudit.contracts.snapshot import SNAPSHOT_FILE
    from specaudit.execution.records import read_manifest

    parent = Path(runs_folder)
    runs = [folder for folder in sorted(parent.iterdir()) if (folder / MANIFEST_FILE).is_file()] if parent.is_dir() else []
    if not runs:
        raise InputError(f"--resume: no audit run in {parent}/ to resume; name its folder: --resume RUN_DIR")
    last = max(runs, key=lambda folder: (str(read_manifest(folder).get("created") or ""), folder.name))
    if (last / SNAPSHOT_FILE).is_file():
        raise InputError(
            f"--resume: the last run in {parent}/, {last}, is finished ({SNAPSHOT_FILE} written); name the run to continue: --resume RUN_DIR"
        )
    return last


def resumed_config(run_dir: str | Path) -> RunConfig:
    """The settings a run folder was started with (its manifest's), to continue it."""
    from specaudit.config import run_config_from
    from specaudit.contracts.run import MANIFEST_FILE
    from specaudit.execution.records import read_manifest

    run_dir = Path(run_dir)
    if not (run_dir / MANIFEST_FILE).is_file():
        settings = run_dir / "settings.json"
        hint = (
            "it holds the per-setting audits of --sampling: rerun that command with --out " + str(run_dir)
            if settings.is_file() or any(run_dir.glob(f"*/{MANIFEST_FILE}"))
            else "name the folder an audit wrote (reports/<run-id>)"
        )
        raise InputError(f"--resume {run_dir}: no audit run there (no {MANIFEST_FILE}); {hint}")
    config = read_manifest(run_dir).get("config")
    if not isinstance(config, dict):
        raise InputError(f"--resume {run_dir}: {MANIFEST_FILE} holds no run settings (`config`); the run folder is damaged")
    return run_config_from(dict(config), f"--resume {run_dir}: {MANIFEST_FILE}")


def split_audit_config(options: dict, source: str) -> tuple[dict, dict, dict]:
    """A config file holds run options at top level plus `analysis:` and `gate:` sections."""
    analysis = options.pop("analysis", None) or {}
    gate = options.pop("gate", None) or {}
    for name, section in (("analysis", analysis), ("gate", gate)):
        if not isinstance(section, dict):
            raise InputError(f"{source}: `{name}:` must be a mapping of option: value")
    return options, analysis, gate  # each section is checked by its model (specaudit.config)
