"""`specaudit selftest --identity`: each engine runs with the target as its own draft, and its
acceptance is held to what its rule gives a correct verifier (specaudit.stats.identity).

No statistics of the output are needed: the engine decodes a small plan with `--draft target`,
its records say which drafts the verifier judged and kept, and analysis.identity tests that
against the registry's rule (1 for rejection sampling, max p_t for a greedy draft kept on a
match). One row per engine × sampling setting (× verify function for the speculative engine,
where a self-test mutant can be plugged in to see the check fail).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from specaudit.contracts.engines import ENGINES, IDENTITY_DRAFT, resolve
from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE, SPECULATIVE_ENGINE
from specaudit.contracts.status import CheckStatus
from specaudit.decoding._spec import SamplingSpec
from specaudit.decoding.settings import setting_label
from specaudit.errors import InputError
from specaudit.selftest.harness import selftest_config
from specaudit.stats.identity import DEFAULT_TOLERANCE, REJECTION_SAMPLING

if TYPE_CHECKING:
    from specaudit.models import ModelPair
    from specaudit.prompts import PromptSet


def identity_engines() -> tuple[str, ...]:
    """The registry's engines `--identity` can run: not those that take no draft of their own, the
    control, the screen (it has no verifier) and a server's (started with whatever draft it was given)."""
    return tuple(name for name, spec in ENGINES.items() if name not in (CONTROL_ENGINE, SCREEN_ENGINE) and not spec.remote_models)


def check_engine_names(names: Sequence[str]) -> list[str]:
    known = identity_engines()
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise InputError(f"--engines names no engine; give a comma list from {', '.join(known)}")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"--identity cannot run engine(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return names


def identity_run(
    engine: str,
    spec: SamplingSpec,
    prompt_set: PromptSet,
    *,
    target: str = "default",
    pair: ModelPair | None = None,
    samples: int = 2,
    max_new_tokens: int = 32,
    k: int = 4,
    seed: int = 0,
    alpha: float = 0.05,
    tolerance: float = DEFAULT_TOLERANCE,
    verify: str | None = None,
    extra: dict | None = None,
) -> dict[str, Any]:
    """One engine at one setting with `--draft target`: its identity check as a table row."""
    from specaudit.analysis.identity import identity_section, rule_of
    from specaudit.engines import run
    from specaudit.execution.faults import read_faults
    from specaudit.execution.records import read_manifest, read_records

    registry = ENGINES[engine]
    cfg = selftest_config(
        spec,
        samples=samples,
        engines=(engine,),
        target=target,
        draft=IDENTITY_DRAFT,
        k=k,
        max_new_tokens=max_new_tokens,
        seed=seed,
        verify=verify,
        extra=extra or {},
    )
    local = registry.kind == "local"
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        run(cfg, folder, pair=pair if local else None, prompt_set=prompt_set, progress=False)
        seconds = time.perf_counter() - started
        records, manifest = read_records(f"{folder}/records.jsonl"), read_manifest(folder)
        faults = read_faults(folder)
        scorer = pair if local else _scoring_pair(registry, manifest, records)
        section = identity_section(records, manifest, pair=scorer, alpha=alpha, tolerance=tolerance)
    name = engine if local else SPECULATIVE_ENGINE
    check = section.engines.get(name) if section is not None else None
    if check is None and not faults:
        raise InputError(f"the {engine} run with --draft target wrote no speculative records to check")
    row = {
        "engine": engine,
        "sampling": setting_label(spec),
        "verify": (verify or "correct").rpartition(":")[2],
        "rule": check.rule if check else rule_of(registry, manifest.get("config")),
        "accepted": check.accepted if check else 0,
        "judged": check.tested if check else 0,
        "acceptance": check.acceptance if check else None,
        "expected": check.expected if check else None,
        "interval_low": check.interval[0] if check and check.interval else None,
        "interval_high": check.interval[1] if check and check.interval else None,
        "pvalue": check.pvalue if check else None,
        "verdict": check.verdict if check else None,
        "faults": len(faults),
        "seconds": seconds,
        "message": check.message if check else "",
    }
    if faults and not row["judged"]:  # an engine that fails instead of speculating cannot pass its identity check
        first = faults[0]
        drafted = sum((r.get("proposed") or 0) > 0 for r in records)
        row["verdict"] = CheckStatus.FAIL
        row["message"] = (
            f"nothing judged: {len(faults)} engine call(s) failed (first: {first.error}: {' '.join(first.message.split())[:160]}), "
            f"and the {len(records)} records written drafted on {drafted}"
        )
    return row


def _scoring_pair(registry: Any, manifest: dict, records: list[dict]) -> Any:
    """The target's scored distributions for a greedy-match rule whose records lack position_accept
    (llama-server's): the engine's own scoring pair, else the run's target loaded here."""
    from specaudit.analysis.identity import rule_of

    if rule_of(registry, manifest.get("config")) == REJECTION_SAMPLING or all(
        r.get("position_accept") is not None for r in records if r["engine"] == SPECULATIVE_ENGINE
    ):
        return None
    if registry.scoring_pair:
        return resolve(registry.scoring_pair)(manifest)
    from specaudit.models import load_pair

    return load_pair(manifest["config"]["target"], None)


def identity_selftest(
    engines: Sequence[str],
    settings: Sequence[SamplingSpec],
    prompt_set: PromptSet,
    *,
    target: str = "default",
    verifies: Sequence[str | None] = (None,),
    **options: Any,
) -> pd.DataFrame:
    """Every engine at every setting (and, for the speculative engine, every verify function):
    one row each. A local engine's models are loaded once."""
    import torch

    from specaudit.models import load_pair

    # One thread, as a run's own loading gives it (engines.decode.load_pair_for): batch-1 decoding
    # of small models gains nothing from a second, and threads that wait on each other under any
    # other load slowed the embedded pair here ninefold (150-270 s per 32-token record, 16-20 s on one).
    torch.set_num_threads(1)
    pair = None
    rows = []
    for engine in check_engine_names(engines):
        if ENGINES[engine].kind == "local" and pair is None:
            pair = load_pair(target, IDENTITY_DRAFT)
        for spec in settings:
            for verify in verifies if engine == SPECULATIVE_ENGINE else (None,):
                rows.append(identity_run(engine, spec, prompt_set, target=target, pair=pair, verify=verify, **options))
    return pd.DataFrame(rows)


def failed_rows(table: pd.DataFrame) -> list[str]:
    """'engine at setting (verify)' of each row whose acceptance fell outside its interval."""
    failed = table[table["verdict"] == str(CheckStatus.FAIL)]
    return [f"{row.engine} at {row.sampling}" + (f" ({row.verify})" if row.verify != "correct" else "") for row in failed.itertuples()]


__all__ = ["check_engine_names", "failed_rows", "identity_engines", "identity_run", "identity_selftest"]
