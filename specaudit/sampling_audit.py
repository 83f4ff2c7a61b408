"""One audit per sampling setting (`specaudit audit --sampling A B ...`), and the page that puts
their verdicts side by side.

Each setting is a whole audit (screen, engines, analysis, report, gate) in its own folder
OUT/<setting>/, with the models loaded once: acceptance, the correctness tests and the speed
all depend on the warping, so nothing is shared between settings but the prompts and seeds.
OUT/summary.md and OUT/settings.json list per setting the correctness verdict, the TV upper
bound, the smallest distortion the tests would have found and the gate, and the bug classes no
tested setting can show (specaudit.decoding.settings). The exit code is the worst setting's:
the gate fails if any setting fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specaudit.config import RunConfig
from specaudit.contracts import EquivalenceStatus
from specaudit.decoding import SamplingSpec
from specaudit.decoding.settings import BUG_CLASSES, setting_label, setting_slug

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import Snapshot
    from specaudit.models import ModelPair

SETTINGS_FILE = "settings.json"


@dataclass(frozen=True)
class SettingsAuditResult:
    out_dir: Path
    rows: list[dict[str, Any]]  # one per setting, see `setting_row`
    files: dict[str, Path]
    exit_code: int

    @property
    def gate_status(self) -> str:
        return "FAIL" if self.exit_code else ("WARN" if any(r["gate"] == "WARN" for r in self.rows) else "PASS")


def setting_row(spec: SamplingSpec, snapshot: Snapshot, folder: Path, exit_code: int, decision: str | None = None) -> dict[str, Any]:
    """What one setting's audit concluded about the speculative engine(s): the worst engine's
    status, its TV bound and detectable PIT distortion, the gate."""
    section = snapshot.equivalence
    engines = {name: entry for name, entry in section.engines.items() if name != section.control}
    order = [s.value for s in (EquivalenceStatus.VIOLATION, EquivalenceStatus.NOT_RUN, EquivalenceStatus.NO_VIOLATION_FOUND)]
    rank = lambda name: order.index(engines[name].status) if engines[name].status in order else len(order)  # noqa: E731
    worst_name = min(engines, key=rank) if engines else None
    worst = engines[worst_name] if engines else None
    tv = worst.tv_bound if worst is not None else None
    power = (worst.power if worst is not None else None) or {}  # open by design: the power study's figures
    return {
        "setting": setting_label(spec),
        "folder": folder.name,
        "engine": worst_name,
        "correctness": worst.status if worst is not None and worst.status is not None else "not run",
        "tv_upper": tv.upper if tv is not None else None,
        "kl_upper": tv.kl_upper if tv is not None else None,
        "detectable_pit_distortion": power.get("pit_tv"),
        "gate": str(snapshot.gate.status if snapshot.gate is not None else "not run").upper(),
        "exit_code": exit_code,
        "decision": decision,  # the report's decision (gate.results.DECISIONS key)
        "blind_to": [c.name for c in BUG_CLASSES if not c.visible(spec)],
    }


def audit_settings(
    cfg: RunConfig,
    out_dir: str | Path,
    specs: Sequence[SamplingSpec],
    *,
    analysis: dict | None = None,
    gate: dict | None = None,
    pair: ModelPair | None = None,
    progress: bool = True,
    command: str | None = None,
) -> SettingsAuditResult:
    from specaudit._files import check_output_folder, write_json_atomic
    from specaudit.audit import audit
    from specaudit.engines.decode import load_pair_for

    out_dir = Path(out_dir)
    check_output_folder(out_dir, create=False)
    pair = pair or load_pair_for(cfg)
    rows = []
    for spec in specs:
        folder = out_dir / setting_slug(spec)
        result = audit(cfg.with_setting(spec), folder, analysis=analysis, gate=gate, pair=pair, progress=progress, command=command)
        rows.append(setting_row(spec, result.snapshot, folder, result.exit_code, result.decision))
    out_dir.mkdir(parents=True, exist_ok=True)
    never = [c for c in BUG_CLASSES if not any(c.visible(spec) for spec in specs)]
    payload = {"settings": rows, "not_tested_by_any_setting": [{"class": c.name, "reports": c.reports} for c in never]}
    write_json_atomic(out_dir / SETTINGS_FILE, payload)
    summary = out_dir / "summary.md"
    summary.write_text(settings_markdown(rows, specs), encoding="utf-8")
    exit_code = max((r["exit_code"] for r in rows), default=0)
    return SettingsAuditResult(out_dir, rows, {"summary": summary, "settings": out_dir / SETTINGS_FILE}, exit_code)


def _number(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else "—"


def settings_markdown(rows: list[dict[str, Any]], specs: Sequence[SamplingSpec]) -> str:
    """The side-by-side page: verdict per setting, then which bug classes each setting can show."""
    from specaudit.report.exports import md_escape

    failed = [r["setting"] for r in rows if r["exit_code"]]
    title = f"FAIL at {', '.join(failed)}" if failed else "no setting fails"
    lines = [f"# specaudit over {len(rows)} sampling settings: {title}", ""]
    lines += ["| setting | correctness | TV upper bound | detectable PIT distortion | gate | report |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {md_escape(r['setting'])} | {md_escape(r['correctness'])} | {_number(r['tv_upper'])} | "
            f"{_number(r['detectable_pit_distortion'])} | {r['gate']} | `{r['folder']}/report.html` |"
        )
    lines += ["", "## Which bug classes each setting can show", ""]
    lines += ["| bug class | reported in | " + " | ".join(md_escape(setting_label(s)) for s in specs) + " |"]
    lines += ["|---|---|" + "---|" * len(specs)]
    for c in BUG_CLASSES:
        cells = " | ".join("yes" if c.visible(s) else "**no**" for s in specs)
        lines.append(f"| {md_escape(c.name)}: {md_escape(c.example)} | {md_escape(c.reports)} | {cells} |")
    never = [c.name for c in BUG_CLASSES if not any(c.visible(s) for s in specs)]
    lines += [
        "",
        (
            "Not tested by any setting here: " + "; ".join(never) + "."
            if never
            else "Every bug class above is visible at one setting at least."
        ),
        "A setting marked **no** cannot show that class at all: a run carrying it is distributed exactly as a correct run there.",
        "",
    ]
    return "\n".join(lines)
