"""Markdown views of the training card and of the before/after comparison."""

from __future__ import annotations


def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _num(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _interval(entry: dict | None) -> str:
    if not entry or entry.get("value") is None:
        return "–"
    return f"{entry['value']:.3f} [{entry['ci_low']:.3f}, {entry['ci_high']:.3f}]"


def training_card_markdown(card: dict) -> str:
    data, training, weighting = card["data"], card["training"], card["weighting"]
    lines = [
        "# Training card: distilled draft",
        "",
        f"- Source run: `{card['source_run']}`; target `{card['target']}`; initial draft `{card['initial_draft']}`; written to `draft/`.",
        f"- Objective: **{card['objective']['name']}**: {card['objective']['definition']}.",
        f"- Data: {data['source']}: {data['train_sequences']} sequences ({data['train_positions']} positions) from "
        f"{data['train_prompts']} training prompts, {data['samples_per_prompt']} sample(s) each, up to {data['max_new_tokens']} tokens; "
        f"{data['held_out_prompts']} held-out prompts; split {data['split']}.",
        f"- Trained: {training['trained']}, layers {training['trained_layers']}, {training['trained_parameters']:,} parameters; "
        f"{training['steps']} steps of {training['batch_size']} sequences, {training['optimizer']} lr {training['learning_rate']}, "
        f"seed {training['seed']}, {training['seconds']} s on {training['device']}.",
        "",
        f"## Training mix over `{weighting['dimension']}` (lowest group by the audit: `{weighting['lowest_group_by_audit']}`)",
        "",
        "| group | audit α | train prompts | " + " | ".join(f"share ({name})" for name in weighting["compared"]) + " |",
        "|---|---|---|" + "---|" * len(weighting["compared"]),
    ]
    for group, alpha in weighting["audit_alpha"].items():
        shares = " | ".join(_pct(s.get(group)) for s in weighting["compared"].values())
        lines.append(f"| {group} | {_num(alpha)} | {data['train_prompts_per_group'].get(group, 0)} | {shares} |")
    lines += ["", "## Loss (mean objective per step, every 10th step)", ""]
    for name, curve in card["loss_curve"].items():
        lines.append(f"- {name}: " + ", ".join(f"{v:.3f}" for v in curve[::10]) + (f" … {curve[-1]:.3f}" if curve else ""))
    if card.get("held_out_objective"):
        lines += ["", "## Held-out objective (TV, lower is better)", ""]
        for name, entry in card["held_out_objective"].items():
            lines.append(f"- {name}: {_num(entry['before'])} → {_num(entry['after'])}")
    return "\n".join(lines) + "\n"


def before_after_markdown(summary: dict) -> str:
    comparison = summary["comparison"]
    lines = [
        f"# Before / after mitigation (`{summary['dimension']}`)",
        "",
        f"Measurement: {summary['measurement']}. Reference group: `{comparison['reference']}`. "
        f"Lowest group found by the audit: `{summary['lowest_group_by_audit']}`. Training mix: {summary['weighting']}.",
        "",
        "| group | α before | α after | change [95% CI] | relative | ratio to ref. before → after | predicted speed-up before | after "
        "| held-out prompts |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for group, row in comparison["groups"].items():
        ratio = row.get("ratio_to_reference") or {}
        ratio_text = f"{_num(ratio.get('before'))} → {_num(ratio.get('after'))}" if ratio else ""
        speed = row.get("speedup") or {}
        lines.append(
            f"| {group} | {_interval(row['before'])} | {_interval(row['after'])} | {_interval(row['change'])} | "
            f"{_pct(row.get('relative_change'))} | {ratio_text} | {_interval(speed.get('before'))} | {_interval(speed.get('after'))} | "
            f"{row['before']['n_prompts']} |"
        )
    worst = comparison["worst_ratio"]
    lines += [
        "",
        f"Worst group's ratio to the reference: {_num(worst['before'])} → {_num(worst['after'])}. Predicted speed-up at the "
        f"run's k = {summary['run_k']} with c = {_num(comparison.get('cost_ratio'))} (one measured cost ratio for both drafts).",
        "",
    ]
    lines += [
        "## Training mix compared at the same budget",
        "",
        "| weighting | overall α after | lowest group α after | lowest group change | worst ratio after |",
        "|---|---|---|---|---|",
    ]
    for name, entry in summary["weightings"].items():
        lines.append(
            f"| {name} | {_interval(entry['overall_after'])} | {_interval(entry['lowest_group_after'])} | "
            f"{_interval(entry['lowest_group_change'])} | {_num(entry['worst_ratio']['after'])} |"
        )
    cost = summary["cost"]
    lines += [
        "",
        f"## Policies (distilled draft, cost ratio c = {cost['cost_ratio']:.3f} measured here; run k = {summary['run_k']})",
        "",
        "| group | α train | k | route to vanilla | predicted speed-up (run k / policy) | measured speed-up at policy k |",
        "|---|---|---|---|---|---|",
    ]
    for group, entry in summary["policies"].items():
        predicted = entry["predicted_speedup_held_out"]
        measured = entry.get("measured_speedup_held_out")
        lines.append(
            f"| {group} | {_num(entry['alpha'])} | {entry['k']} | {'yes' if entry['route_to_vanilla'] else 'no'} | "
            f"{_num(predicted['run_k'], 2)} / {_num(predicted['policy'], 2)} | "
            f"{_num(measured['policy_k'], 2) + ' (' + str(measured['prompts']) + ' prompt(s))' if measured else 'not measured'} |"
        )
    equivalence = summary["equivalence"]
    lines += ["", "## Equivalence of the distilled draft (real speculative engine, `specaudit analyze`)", ""]
    if equivalence.get("status") == "not run":
        lines.append(f"Not run: {equivalence.get('reason')}.")
    else:
        lines.append(
            f"Status **{str(equivalence['status']).upper()}** (speculative verdict {equivalence.get('verdict')}) on "
            f"{len(equivalence['prompts'])} held-out prompts, {equivalence['records']} records, {equivalence['tokens']} tokens; "
            f"goodness-of-fit p = {_num(equivalence.get('goodness_of_fit_p'))}. Run folder: `{equivalence['run_dir']}/`."
        )
    return "\n".join(lines) + "\n"
