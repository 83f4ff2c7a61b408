"""Markdown views of the training card and of the before/after comparison."""

from __future__ import annotations


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, digits: int = 3) -> str:
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


def _speed(entry: dict | None) -> str:
    if not entry or entry.get("value") is None:
        return "–"
    if entry.get("ci_low") is None:
        return f"{entry['value']:.2f}× (one prompt, no interval)"
    return f"{entry['value']:.2f}× [{entry['ci_low']:.2f}, {entry['ci_high']:.2f}]"


def policy_reaudit_markdown(summary: dict) -> list[str]:
    """The policies' timed re-audit on held-out prompts: speed-up without and with the policy."""
    reaudit = summary.get("policy_reaudit") or {}
    lines = ["", "## Policies re-audited on held-out prompts (timed here)", ""]
    if reaudit.get("status") != "run":
        return [*lines, f"Not run: {reaudit.get('reason', 'no timing')}.", ""]
    engines = reaudit.get("engines", "specaudit's engines")
    lines += [
        f"Method: {reaudit['method']}. Decoded by {engines}; run k = {reaudit['run_k']}, up to {reaudit['max_new_tokens']} new tokens.",
        "",
        "| group | policy | held-out prompts | speed-up without policy (run k) | speed-up with policy | with / without |",
        "|---|---|---|---|---|---|",
    ]
    for group, row in reaudit["groups"].items():
        policy = "all" if group == "(overall)" else "plain decoding" if row["route_to_vanilla"] else f"speculate, k = {row['k']}"
        lines.append(
            f"| {group} | {policy} | {row['n_prompts']} | {_speed(row['speedup_without_policy'])} | "
            f"{_speed(row['speedup_with_policy'])} | {_speed(row['gain_with_policy'])} |"
        )
    slower = reaudit.get("slower_than_vanilla_with_policy") or []
    lines += [
        "",
        f"Groups routed to plain decoding: {', '.join(reaudit['routed']) or 'none'}. Groups measured slower than plain decoding "
        f"under the policy (interval below 1): {', '.join(slower) or 'none'}.",
        "",
    ]
    return lines


def policies_only_markdown(summary: dict) -> str:
    """before_after.md when no draft was trained: the fitted policies and their re-audit."""
    cost = summary["cost"]
    fit = summary["policy_fit"]
    lines = [
        f"# Mitigation by policy (`{summary['dimension']}`), no training",
        "",
        f"{summary['not_trained']}.",
        "",
        f"Fitted on the audit `{summary['source_run']}`'s records of {summary['train_prompts']} training prompts "
        f"(engine `{fit['engine']}`, speed-up from {fit['speed_source']}); re-audited on {summary['held_out_prompts']} held-out prompts "
        f"(whole pairs). Cost ratio c = {_num(cost.get('cost_ratio'))}, verification cost v = {_num(cost.get('verify_cost', 1.0))} ({cost.get('source')}). Lowest group by the audit: "
        f"`{summary['lowest_group_by_audit']}`.",
        "",
        "## Policies (fitted on the training prompts)",
        "",
        "| group | α (train) | speed-up at run k (train) | k | route to plain decoding | why |",
        "|---|---|---|---|---|---|",
    ]
    for group, entry in summary["policies"].items():
        lines.append(
            f"| {group} | {_num(entry['alpha'])} | {_speed(entry.get('measured_speedup_fit'))} | "
            f"{0 if entry['route_to_vanilla'] else entry['k']} | {'yes' if entry['route_to_vanilla'] else 'no'} | {entry['reason']} |"
        )
    lines += policy_reaudit_markdown(summary)
    return "\n".join(lines)


def before_after_markdown(summary: dict) -> str:
    if not summary.get("trained", True):
        return policies_only_markdown(summary)
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
        "| group | α train | k | route to vanilla | predicted speed-up (run k / policy) |",
        "|---|---|---|---|---|",
    ]
    for group, entry in summary["policies"].items():
        predicted = entry["predicted_speedup_held_out"]
        lines.append(
            f"| {group} | {_num(entry['alpha'])} | {entry['k']} | {'yes' if entry['route_to_vanilla'] else 'no'} | "
            f"{_num(predicted['run_k'], 2)} / {_num(predicted['policy'], 2)} |"
        )
    lines += policy_reaudit_markdown(summary)
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
