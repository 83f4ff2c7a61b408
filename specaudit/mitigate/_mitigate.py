"""audit → fix → re-audit: `specaudit mitigate RUN_DIR --out DIR`.

Reads an audited run folder (records, manifest, snapshot), splits its prompts into training and
held-out sides by pair (a parallel prompt never on both), distils the draft on the target's own
samples of the training prompts with the training mix weighted toward the groups the audit
found disadvantaged, derives the per-group k and routing policies, and re-measures everything
on the held-out prompts. A draft that cannot be trained (int8, ngram, a quantised model) gets the
policies alone, fitted on the audit's records and re-audited by timing (`_policies_only`,
specaudit.mitigate._routing). Everything is written into a temporary folder renamed into place
at the end, so a failure leaves no half-written output.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

import specaudit.mitigate._acceptance as acc
import specaudit.mitigate._distil as dst
import specaudit.mitigate._policy as pol
from specaudit._files import write_folder_atomic
from specaudit.contracts.engines import ENGINES, resolve
from specaudit.errors import InputError
from specaudit.mitigate._options import check_options
from specaudit.mitigate._reaudit import REAUDIT_FOLDER, compare_groups, equivalence_check
from specaudit.mitigate._report import before_after_markdown, training_card_markdown
from specaudit.mitigate._routing import Decode, audit_evidence, reaudit_policies, torch_decoder
from specaudit.mitigate._run_folder import attach_texts, choose_dimension, group_alphas, prompts_from_run, read_run, split_by_pair

if TYPE_CHECKING:
    from typing import Any

    from specaudit.mitigate._acceptance import TargetSample
    from specaudit.mitigate._distil import DistilResult
    from specaudit.models import ModelPair
    from specaudit.prompts import Prompt

# Budgets: the demonstration one fits about 15 minutes of a 2-core CPU on the default pair.
DEMO_BUDGET = {"samples": 2, "max_new_tokens": 32, "steps": 60, "batch_size": 4, "equivalence_prompts": 4, "timing_prompts": 3}
QUICK_BUDGET = {"samples": 1, "max_new_tokens": 16, "steps": 20, "batch_size": 4, "equivalence_prompts": 2, "timing_prompts": 2}
# Derived drafts that distillation cannot improve, and why (the one line mitigate prints for them).
UNTRAINABLE_DRAFTS = {
    "ngram": "a prompt-lookup table with no weights",
    "int8": "the target's weights rounded to int8, which training would move off the int8 grid",
}


@dataclass(frozen=True)
class MitigationResult:
    """Where the outputs went and the before/after summary (also in before_after.json)."""

    out_dir: Path
    summary: dict
    files: dict


# ------------------------------------------------------------------ the command
def mitigate(
    run_dir: str | Path,
    out_dir: str | Path,
    *,
    draft: str | None = None,
    dimension: str | None = None,
    held_out: float = 0.5,
    weighting: str = "inverse-acceptance",
    compare: tuple[str, ...] | list[str] = ("unweighted",),
    objective: str = "tv",
    train_layers: int = 2,
    learning_rate: float = 3e-4,
    per_group: int | None = None,
    quick: bool = False,
    samples: int | None = None,
    max_new_tokens: int | None = None,
    steps: int | None = None,
    batch_size: int | None = None,
    equivalence_prompts: int | None = None,
    timing_prompts: int | None = None,
    seed: int = 0,
    device: str = "auto",
    progress: bool = True,
) -> MitigationResult:
    """Distil a better draft, derive per-group k and routing policies, and re-audit on held-out
    prompts; writes DIR/{draft/, training_card.*, policy.*, before_after.*, report.html, reaudit-run/}."""
    from specaudit.decoding import SamplingSpec
    from specaudit.engines.decode import eos_token_ids, pad_token_id
    from specaudit.models import load_pair

    check_options(
        held_out=held_out,
        train_layers=train_layers,
        learning_rate=learning_rate,
        per_group=per_group,
        samples=samples,
        max_new_tokens=max_new_tokens,
        steps=steps,
        batch_size=batch_size,
        equivalence_prompts=equivalence_prompts,
        timing_prompts=timing_prompts,
        seed=seed,
    )
    started = time.perf_counter()
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise InputError(f"--out {out_dir} exists and is not empty; choose a new folder (mitigation never overwrites)")
    budget = dict(QUICK_BUDGET if quick else DEMO_BUDGET)
    overrides = {
        "samples": samples,
        "max_new_tokens": max_new_tokens,
        "steps": steps,
        "batch_size": batch_size,
        "equivalence_prompts": equivalence_prompts,
        "timing_prompts": timing_prompts,
    }
    budget.update({k: v for k, v in overrides.items() if v is not None})
    for name in [weighting, *compare]:
        if name not in dst.WEIGHTINGS:
            raise InputError(f"weighting {name!r}: choose one of {', '.join(dst.WEIGHTINGS)}")
    if objective not in dst.OBJECTIVES:
        raise InputError(f"--objective {objective!r}: choose tv or kl")

    manifest, records, snapshot = read_run(run_dir)
    config = manifest.get("config") or {}
    run_draft = config.get("draft")
    draft_name = draft or run_draft
    if draft_name is None:
        raise InputError(f"{run_dir} has no draft in its manifest; give --draft early-exit:N or a model folder")
    if draft is not None and draft != run_draft and draft in UNTRAINABLE_DRAFTS:
        raise InputError(
            f"--draft {draft!r} cannot be trained (no float weights to distil); give early-exit:N or a model folder, or omit "
            f"--draft to fit policies for the run's draft {run_draft!r} without training"
        )
    not_trained = UNTRAINABLE_DRAFTS.get(draft_name)
    # an engine that times decoding itself (llama.cpp's, vLLM's): policies are re-audited with its own engines
    run_backend = ENGINES.get(str(manifest.get("backend")))
    run_decoder = resolve(run_backend.run_decoder) if run_backend is not None and run_backend.run_decoder else None
    if run_decoder is not None:
        if draft is not None and draft != run_draft:
            raise InputError(
                f"{run_dir} was decoded by {run_backend.decoder_name}: mitigate fits policies for its own draft {run_draft!r} there; "
                "omit --draft (training a draft needs an audit with specaudit's engines)"
            )
        not_trained = not_trained or run_backend.draft_untrained_because
    if not_trained and per_group is not None:
        raise InputError(
            f"--per-group needs a trainable draft: without training the policies are fitted on the audit's own prompts, "
            f"and draft {draft_name!r} cannot be trained"
        )
    dimension, worst_group = choose_dimension(snapshot, dimension)
    dimensions = [d for d, s in snapshot["groups"].items() if s.get("by_group")]
    audit_alpha = group_alphas(snapshot, dimension)
    spec = SamplingSpec(float(config.get("temperature", 1.0)), int(config.get("top_k", 0)), float(config.get("top_p", 1.0)))
    run_k = int(config.get("k", 4))
    budget["max_new_tokens"] = min(int(budget["max_new_tokens"]), int(config.get("max_new_tokens", budget["max_new_tokens"])))

    # Batch-1 decoding and small batches gain little from more CPU threads, and OpenMP threads that
    # wait on each other under competing load are many times slower (see runner.load_pair_for).
    torch.set_num_threads(int(config.get("threads") or 1))
    prompts = prompts_from_run(records)
    if per_group is None:  # a split that cannot work fails before any model loads
        split_by_pair(prompts, held_out, seed, dimensions)
    max_new = int(budget["max_new_tokens"])
    if run_decoder is not None:  # timed by the run's own engines; no torch model is loaded
        timing = Timing(run_decoder(manifest, max_new_tokens=max_new), f"the run's {run_backend.decoder_name} engines")
    else:
        pair = load_pair(config.get("target", "default"), draft_name, device=device)
        if not not_trained and dst.untrainable_reason(pair.draft):
            if draft is not None and draft != run_draft or per_group is not None:
                dst.trainable_layers(pair.draft, train_layers)  # raises: the draft asked for cannot be trained
            not_trained = dst.untrainable_reason(pair.draft)
        if not not_trained:
            dst.trainable_layers(pair.draft, train_layers)  # an impossible --train-layers fails before any sampling
        eos_ids = eos_token_ids(pair)
        pad_id = pad_token_id(pair, eos_ids)
        timing = Timing(torch_decoder(pair, pair.draft, spec=spec, eos_ids=eos_ids, max_new_tokens=max_new), "specaudit's engines", pair)
    if not_trained:
        from specaudit.execution.records import RECORDS_FILE, read_records

        train_ids, held_ids = split_by_pair(prompts, held_out, seed, dimensions)
        return _policies_only(
            timing,
            read_records(run_dir / RECORDS_FILE),
            prompts,
            train_ids,
            held_ids,
            note=f"draft {draft_name!r} was not trained ({not_trained}); policies fitted and re-audited without training",
            run_dir=run_dir,
            out_dir=out_dir,
            draft_name=draft_name,
            dimension=dimension,
            worst_group=worst_group,
            config=config,
            budget=budget,
            run_k=run_k,
            seed=seed,
            progress=progress,
            started=started,
        )
    prompts, text_note = attach_texts(prompts, config, pair.tokenizer, per_group)
    train_ids, held_ids = split_by_pair(prompts, held_out, seed, dimensions)
    group_of = {pid: prompts[pid].attributes.get(dimension) for pid in prompts}

    def draw(ids: list[str]) -> list[acc.TargetSample]:  # one side at a time: a sampling batch never mixes the sides
        return acc.sample_target(
            pair.target,
            {pid: prompts[pid].ids for pid in ids},
            spec=spec,
            samples=int(budget["samples"]),
            max_new_tokens=int(budget["max_new_tokens"]),
            eos_ids=eos_ids,
            vocab_size=pair.vocab_size,
            pad_id=pad_id,
            seed=seed,
            progress=progress,
        )

    def score(draft_model: torch.nn.Module, samples: list[TargetSample], desc: str) -> dict[str, acc.PromptAcceptance]:
        return acc.measure_acceptance(draft_model, samples, spec=spec, vocab_size=pair.vocab_size, k=run_k, progress=progress, desc=desc)

    train_samples, held_samples = draw(train_ids), draw(held_ids)
    before = score(pair.draft, held_samples, "acceptance before")

    sizes = {g: sum(1 for p in train_ids if group_of[p] == g) for g in audit_alpha}
    first, _ = dst.trainable_layers(pair.draft, train_layers)
    prepared = dst._prepare(pair.draft, train_samples, first, progress)
    trained: dict[str, dict] = {}
    main_draft = None
    for name in dict.fromkeys([weighting, *compare]):
        shares = dst.group_weights(audit_alpha, sizes, name)
        weights = dst.sequence_weights(train_samples, group_of, shares)
        result = dst.distil(
            pair.target,
            pair.draft,
            train_samples,
            weights,
            spec=spec,
            vocab_size=pair.vocab_size,
            objective=objective,
            weighting=name,
            steps=int(budget["steps"]),
            batch_size=int(budget["batch_size"]),
            learning_rate=learning_rate,
            train_layers=train_layers,
            seed=seed,
            progress=progress,
            prepared=prepared,
        )
        after = score(result.draft, held_samples, f"acceptance after ({name})")
        trained[name] = {"result": result, "shares": shares, "after": after}
        if main_draft is None:
            main_draft = result

    held_groups = {g: [p for p in held_ids if group_of[p] == g] for g in audit_alpha if any(group_of[p] == g for p in held_ids)}
    reference = snapshot["groups"][dimension].get("reference")
    # One cost ratio for both drafts: the distilled draft has the starting draft's layers and dtype,
    # so the before/after speed-ups differ by acceptance only, not by timing noise.
    cost = pol.measure_cost_ratio(pair.target, main_draft.draft, prompts[held_ids[0]].ids)
    comparisons = {
        name: compare_groups(held_groups, before, entry["after"], reference, seed, cost["cost_ratio"]) for name, entry in trained.items()
    }

    # Policies for the distilled draft, fitted on the training prompts, judged on held-out ones.
    main_after_train = score(main_draft.draft, train_samples, "acceptance (train, distilled)")
    train_groups = {g: [p for p in train_ids if group_of[p] == g] for g in audit_alpha}
    policies = {}
    for group in held_groups:
        fitted = pol.group_policy(acc.pooled_alpha(main_after_train, train_groups[group]), cost["cost_ratio"], run_k)
        held_alpha = acc.pooled_alpha(trained[weighting]["after"], held_groups[group])
        fitted["held_out_alpha"] = held_alpha
        fitted["predicted_speedup_held_out"] = {
            "run_k": float(pol.expected_speedup(held_alpha, run_k, cost["cost_ratio"])),
            "policy_k": float(pol.expected_speedup(held_alpha, fitted["k"], cost["cost_ratio"])),
            "policy": 1.0 if fitted["route_to_vanilla"] else float(pol.expected_speedup(held_alpha, fitted["k"], cost["cost_ratio"])),
        }
        policies[group] = fitted
    timing = Timing(
        torch_decoder(pair, main_draft.draft, spec=spec, eos_ids=eos_ids, max_new_tokens=max_new),
        "specaudit's engines",
    )
    policy_reaudit = _time_policies(timing, prompts, held_groups, policies, budget, run_k, seed, progress)

    def write(work: Path) -> dict[str, Path]:
        return _write_outputs(
            work,
            out_dir,
            pair=pair,
            main=main_draft,
            trained=trained,
            comparisons=comparisons,
            policies=policies,
            cost=cost,
            config=config,
            budget=budget,
            run_dir=run_dir,
            draft_name=draft_name,
            dimension=dimension,
            worst_group=worst_group,
            audit_alpha=audit_alpha,
            train_ids=train_ids,
            held_ids=held_ids,
            sizes=sizes,
            objective=objective,
            weighting=weighting,
            run_k=run_k,
            prompts=prompts,
            seed=seed,
            text_note=text_note,
            train_samples=train_samples,
            held_samples=held_samples,
            progress=progress,
            started=started,
            held_groups=held_groups,
            policy_reaudit=policy_reaudit,
        )

    files = write_folder_atomic(out_dir, write)
    summary = json.loads((out_dir / "before_after.json").read_text(encoding="utf-8"))
    return MitigationResult(out_dir, summary, files)


@dataclass(frozen=True)
class Timing:
    """How the policy re-audit decodes: the audit's own engines as one timed decoding (and, for
    specaudit's engines, the pair, to measure a cost ratio the audit's records lack)."""

    decode: Decode
    engines: str
    pair: ModelPair | None = None


def _time_policies(
    timing: Timing,
    prompts: dict[str, Prompt],
    held_groups: dict[str, list[str]],
    policies: dict[str, dict],
    budget: dict[str, Any],
    run_k: int,
    seed: int,
    progress: bool,
) -> dict:
    """The policy re-audit on up to --timing-prompts held-out prompts per group ('not run' at 0)."""
    count = int(budget["timing_prompts"])
    if count <= 0:
        return {"status": "not run", "reason": "--timing-prompts 0"}
    timed = {g: [prompts[p] for p in ids[:count]] for g, ids in held_groups.items()}
    result = reaudit_policies(
        timing.decode, timed, policies, run_k=run_k, max_new_tokens=int(budget["max_new_tokens"]), seed=seed, progress=progress
    )
    return {"status": "run", "engines": timing.engines, **result}


def _policies_only(
    timing: Timing,
    records: list[dict],
    prompts: dict[str, Prompt],
    train_ids: list[str],
    held_ids: list[str],
    *,
    note: str,
    run_dir: Path,
    out_dir: Path,
    draft_name: str,
    dimension: str,
    worst_group: str,
    config: dict,
    budget: dict[str, Any],
    run_k: int,
    seed: int,
    progress: bool,
    started: float,
) -> MitigationResult:
    """Mitigation without training: per-group k and routing fitted on the audit's records of the
    training prompts (any draft, screened audits included), re-audited by timing on held-out ones."""
    group_of = {pid: prompts[pid].attributes.get(dimension) for pid in prompts}
    evidence = audit_evidence(records, train_ids, group_of, seed)  # timing-only repeats included: they are timings
    cost = {"cost_ratio": evidence["cost_ratio"], "verify_cost": evidence["verify_cost"], "source": evidence["cost_source"]}
    pair = timing.pair
    if not np.isfinite(cost["cost_ratio"]) and pair is not None and isinstance(pair.draft, torch.nn.Module):
        cost = {**pol.measure_cost_ratio(pair.target, pair.draft, prompts[held_ids[0]].ids), "source": "measured here (measure_cost_ratio)"}
    held_groups = {}
    for pid in held_ids:
        if group_of[pid] is not None:
            held_groups.setdefault(group_of[pid], []).append(pid)
    held_groups = dict(sorted(held_groups.items()))
    policies = {}
    for group in held_groups:
        fit = evidence["groups"].get(group) or {}
        policies[group] = pol.group_policy(
            fit.get("alpha", float("nan")), cost["cost_ratio"], run_k, fit.get("speedup_run_k"), verify_cost=cost.get("verify_cost", 1.0)
        )
        policies[group]["fit_prompts"] = fit.get("n_prompts", 0)
    policy_reaudit = _time_policies(timing, prompts, held_groups, policies, budget, run_k, seed, progress)
    summary = {
        "kind": "specaudit.before_after",
        "source_run": str(run_dir),
        "dimension": dimension,
        "lowest_group_by_audit": worst_group,
        "trained": False,
        "not_trained": note,
        "draft": draft_name,
        "train_prompts": len(train_ids),
        "held_out_prompts": len(held_ids),
        "policy_fit": {
            "engine": evidence["engine"],
            "speed_source": evidence["speed_source"],
            "method": "per group of the training prompts: alpha = sum accepted / sum positions reached, speed-up at the run's k = "
            "sum plain time per token / sum speculative time per token (95% prompt bootstrap), from the audit's records",
        },
        "cost": cost,
        "policies": policies,
        "policy_reaudit": policy_reaudit,
        "run_k": run_k,
        "equivalence": {
            "status": "not run",
            "reason": "no draft was trained: the draft and the engine are the audit's, so the audit's own equivalence verdict stands",
        },
        "budget": budget,
        "seconds": round(time.perf_counter() - started, 1),
    }
    summary = _finite(summary)

    def write(work: Path) -> dict[str, Path]:
        document = pol.policy_document(
            dimension, policies, default_k=run_k, cost_ratio=cost["cost_ratio"], draft=draft_name, source_run=str(run_dir)
        )
        files = {f"policy_{k}": v for k, v in pol.write_policy_files(work, document).items()}
        (work / "before_after.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        (work / "before_after.md").write_text(before_after_markdown(summary), encoding="utf-8")
        files["before_after"] = work / "before_after.json"
        files["report"] = _write_report(work, out_dir, summary, config, draft=draft_name)
        return files

    return MitigationResult(out_dir, summary, write_folder_atomic(out_dir, write))


def _write_outputs(
    work: Path,
    out_dir: Path,
    *,
    pair: ModelPair,
    main: DistilResult,
    trained: dict[str, dict],
    comparisons: dict[str, dict],
    policies: dict[str, dict],
    cost: dict[str, Any],
    config: dict,
    budget: dict[str, Any],
    run_dir: Path,
    draft_name: str,
    dimension: str,
    worst_group: str,
    audit_alpha: dict[str, float],
    train_ids: list[str],
    held_ids: list[str],
    sizes: dict[str, int],
    objective: str,
    weighting: str,
    run_k: int,
    prompts: dict[str, Prompt],
    seed: int,
    text_note: str | None,
    train_samples: list[TargetSample],
    held_samples: list[TargetSample],
    progress: bool,
    started: float,
    held_groups: dict[str, list[str]],
    policy_reaudit: dict,
) -> dict[str, Path]:
    files: dict[str, Path] = {}
    draft_folder = work / "draft"
    main.draft.save_pretrained(draft_folder)
    pair.tokenizer.save_pretrained(draft_folder)
    provenance = {
        "made_by": "specaudit mitigate",
        "from_run": str(run_dir),
        "target": config.get("target", "default"),
        "initial_draft": draft_name,
        "objective": objective,
        "weighting": weighting,
    }
    (draft_folder / "specaudit-mitigation.json").write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    files["draft"] = draft_folder

    card = {
        "kind": "specaudit.training_card",
        "source_run": str(run_dir),
        "target": config.get("target", "default"),
        "initial_draft": draft_name,
        "draft_folder": "draft",
        "objective": {
            "name": objective,
            "definition": "TV(p, q) = 1 - sum_v min(p(v), q(v)) per position of a target sample, p and q "
            "warped with the run's sampling settings"
            if objective == "tv"
            else "KL(p || q) per position of a target sample",
        },
        "data": {
            "source": "the target's own sampled continuations of the training prompts",
            "train_prompts": len(train_ids),
            "held_out_prompts": len(held_ids),
            "train_sequences": len(train_samples),
            "held_out_sequences": len(held_samples),
            "train_positions": sum(len(s.continuation) for s in train_samples),
            "samples_per_prompt": budget["samples"],
            "max_new_tokens": budget["max_new_tokens"],
            "split": "by pair_id (a parallel prompt never on both sides)",
            "train_prompts_per_group": sizes,
        },
        "weighting": {
            "dimension": dimension,
            "audit_alpha": audit_alpha,
            "lowest_group_by_audit": worst_group,
            "used": weighting,
            "shares": trained[weighting]["shares"],
            "compared": {name: entry["shares"] for name, entry in trained.items()},
        },
        "training": {
            "steps": main.steps,
            "batch_size": main.batch_size,
            "learning_rate": main.learning_rate,
            "optimizer": "AdamW",
            "trained_layers": main.trained_layers,
            "trained": "upper decoder layers and final norm (head frozen)",
            "trained_parameters": main.trained_parameters,
            "seed": seed,
            "seconds": round(main.seconds, 1),
            "device": str(pair.device),
        },
        "loss_curve": {name: entry["result"].loss_curve for name, entry in trained.items()},
        "held_out_objective": {
            name: {
                "before": 1 - comparisons[name]["groups"]["(overall)"]["before"]["value"],
                "after": 1 - comparisons[name]["groups"]["(overall)"]["after"]["value"],
            }
            for name in trained
        }
        if objective == "tv"
        else None,
    }
    (work / "training_card.json").write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    (work / "training_card.md").write_text(training_card_markdown(card), encoding="utf-8")
    files["training_card"] = work / "training_card.json"

    document = pol.policy_document(
        dimension, policies, default_k=run_k, cost_ratio=cost["cost_ratio"], draft="draft", source_run=str(run_dir)
    )
    files.update({f"policy_{k}": v for k, v in pol.write_policy_files(work, document).items()})

    equivalence = {"status": "not run", "reason": "--equivalence-prompts 0"}
    if int(budget["equivalence_prompts"]) > 0:
        chosen = [prompts[p] for group in held_groups.values() for p in group[:1]][: int(budget["equivalence_prompts"])]
        equivalence = equivalence_check(pair, draft_folder, chosen, config, work, progress)
        if text_note and equivalence["status"] == "not run":
            equivalence["reason"] = text_note
    summary = {
        "kind": "specaudit.before_after",
        "source_run": str(run_dir),
        "dimension": dimension,
        "lowest_group_by_audit": worst_group,
        "measurement": "per-position acceptance alpha = mean of beta = sum_v min(p, q) along the target's own samples of the held-out "
        "prompts (the same samples before and after); predicted speed-up = tokens / (steps + c * proposed) from the speculative "
        "counts expected along those samples at the run's k (the screen's dynamic programme) and the measured cost ratio c; "
        "intervals: 95% prompt bootstrap",
        "weighting": weighting,
        "comparison": comparisons[weighting],
        "weightings": {
            name: {
                "overall_after": c["groups"]["(overall)"]["after"],
                "worst_ratio": c["worst_ratio"],
                "lowest_group_after": c["groups"].get(worst_group, {}).get("after"),
                "lowest_group_change": c["groups"].get(worst_group, {}).get("change"),
            }
            for name, c in comparisons.items()
        },
        "trained": True,
        "cost": cost,
        "policies": policies,
        "policy_reaudit": policy_reaudit,
        "run_k": run_k,
        "equivalence": equivalence,
        "budget": budget,
        "seconds": round(time.perf_counter() - started, 1),
    }
    (work / "before_after.json").write_text(json.dumps(_finite(summary), indent=2) + "\n", encoding="utf-8")
    (work / "before_after.md").write_text(before_after_markdown(_finite(summary)), encoding="utf-8")
    files["before_after"] = work / "before_after.json"
    files["report"] = _write_report(work, out_dir, _finite(summary), config)
    return files


def _write_report(work: Path, out_dir: Path, summary: dict, config: dict, draft: str = "draft") -> Path:
    """DIR/report.html: the re-audit's snapshot (the mitigated draft's equivalence, checked) with
    the before/after stored in it as its `mitigation` part, so `specaudit report DIR/reaudit-run`
    renders the same section. Without a re-audit run the report holds the before/after alone."""
    from specaudit._files import write_json_atomic
    from specaudit.contracts.snapshot import SNAPSHOT_FILE, SNAPSHOT_SCHEMA_VERSION, load_snapshot
    from specaudit.report import render_html

    reaudit = work / REAUDIT_FOLDER / SNAPSHOT_FILE
    if reaudit.is_file():
        snapshot = load_snapshot(reaudit)
        snapshot["mitigation"] = summary
        snapshot["run"]["dir"] = str(out_dir / REAUDIT_FOLDER)  # where it lies once the staging folder is renamed
        write_json_atomic(reaudit, snapshot)
    else:
        settings = {key: config[key] for key in ("target", "k", "temperature", "top_k", "top_p", "max_new_tokens") if key in config}
        snapshot = {
            "schema_version": SNAPSHOT_SCHEMA_VERSION,
            "run": {
                "id": "mitigation (no re-audit run)" if summary.get("trained", True) else "mitigation (policies, no training)",
                "config": {**settings, "draft": draft},
                "dir": str(out_dir),
            },
            "equivalence": {"status": "not run"},
            "groups": {},
            "mitigation": summary,
        }
    path = work / "report.html"
    path.write_text(render_html(snapshot), encoding="utf-8")
    return path


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
