"""`specaudit mitigate`: a better draft and per-group policies from an audited run, re-audited."""

from __future__ import annotations

import argparse

from specaudit._validation import finite_float, seed_int


# ---------------------------------------------------------------------- mitigate
def add_mitigate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mitigate",
        help="per-group k / routing policies from an audited run (any draft), and a distilled draft where it is trainable, "
        "re-audited on held-out prompts",
    )
    p.add_argument("run_dir", help="an analysed run folder (records.jsonl, manifest.json, snapshot.json)")
    p.add_argument(
        "--out", required=True, help="new output folder (draft/, training_card.*, policy.*, before_after.*, report.html, reaudit-run/)"
    )
    p.add_argument(
        "--draft",
        help="trainable draft to start from: early-exit:N or a model folder (default: the run's draft; an untrainable "
        "one such as int8 or ngram gets policies without training)",
    )
    p.add_argument(
        "--dimension",
        help="prompt attribute whose groups weight the training mix (default: the one with the lowest group relative to its reference)",
    )
    p.add_argument("--weighting", default="inverse-acceptance", help="inverse-acceptance (default), balanced or unweighted")
    p.add_argument(
        "--compare",
        default="unweighted",
        help="comma list of weightings also trained at the same budget for the comparison table ('' for none; default unweighted)",
    )
    p.add_argument("--objective", default="tv", help="tv (1 - acceptance per position, default) or kl (forward KL)")
    p.add_argument("--held-out", type=finite_float, default=0.5, help="fraction of prompts (whole pairs) held out (default 0.5)")
    p.add_argument("--per-group", type=int, help="draw N prompts per group from the run's prompt set instead of the run's prompts")
    p.add_argument("--train-layers", type=int, default=2, help="upper draft layers trained, with the final norm (default 2)")
    p.add_argument("--learning-rate", type=finite_float, default=3e-4, help="AdamW learning rate (default 3e-4)")
    p.add_argument("--steps", type=int, help="training steps (default 60; --quick 20)")
    p.add_argument("--batch-size", type=int, help="sequences per step (default 4)")
    p.add_argument("--samples", type=int, help="target samples per prompt (default 2; --quick 1)")
    p.add_argument("--max-new-tokens", type=int, help="tokens per target sample (default 32, at most the run's; --quick 16)")
    p.add_argument(
        "--equivalence-prompts",
        type=int,
        help="held-out prompts decoded by the real engine for the equivalence check (default 4; --quick 2; 0 skips it)",
    )
    p.add_argument(
        "--timing-prompts",
        type=int,
        help="held-out prompts per group timed to re-audit the policies: plain vs speculative decoding, "
        "with and without the policy (default 3; --quick 2; 0 skips it)",
    )
    p.add_argument("--seed", type=seed_int, default=0, help="split, sampling and training seed (default 0)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda[:N] (default auto)")
    p.add_argument("--quick", action="store_true", help="a smaller budget (1 sample, 16 tokens, 20 steps, 2 timed prompts per group)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_mitigate)


def cmd_mitigate(args: argparse.Namespace) -> int:
    from specaudit.mitigate import mitigate

    compare = tuple(name for name in (args.compare or "").split(",") if name.strip())
    result = mitigate(
        args.run_dir,
        args.out,
        draft=args.draft,
        dimension=args.dimension,
        held_out=args.held_out,
        weighting=args.weighting,
        compare=tuple(n.strip() for n in compare),
        objective=args.objective,
        train_layers=args.train_layers,
        learning_rate=args.learning_rate,
        per_group=args.per_group,
        quick=args.quick,
        samples=args.samples,
        max_new_tokens=args.max_new_tokens,
        steps=args.steps,
        batch_size=args.batch_size,
        equivalence_prompts=args.equivalence_prompts,
        timing_prompts=args.timing_prompts,
        seed=args.seed,
        device=args.device,
        progress=not args.quiet,
    )
    summary = result.summary
    reaudit = summary.get("policy_reaudit") or {}
    overall = (reaudit.get("groups") or {}).get("(overall)")
    if overall:
        without, with_policy = overall["speedup_without_policy"], overall["speedup_with_policy"]
        policy_line = (
            f"policy re-audit ({overall['n_prompts']} held-out prompts, timed): overall speed-up {without['value']:.2f}x without the "
            f"policy -> {with_policy['value']:.2f}x with it; routed to plain decoding: {', '.join(reaudit['routed']) or 'none'}"
        )
    else:
        policy_line = f"policy re-audit not run ({reaudit.get('reason', 'no timing')})"
    if not summary.get("trained", True):
        print(summary["not_trained"])
        print(f"{result.out_dir}/before_after.md: {policy_line}")
        print(f"policy: {result.out_dir / 'policy.yaml'}; report: {result.files['report']}")
        return 0
    worst = summary["lowest_group_by_audit"]
    row = summary["comparison"]["groups"].get(worst) or summary["comparison"]["groups"]["(overall)"]
    print(
        f"{result.out_dir}/before_after.md: {summary['dimension']}={worst} acceptance {row['before']['value']:.3f} -> "
        f"{row['after']['value']:.3f}; equivalence {str(summary['equivalence'].get('status')).upper()}"
    )
    print(policy_line)
    print(f"draft: {result.out_dir / 'draft'} (use with --draft); policy: {result.out_dir / 'policy.yaml'}")
    print(f"report: {result.files['report']} (before/after section; `specaudit report {result.out_dir / 'reaudit-run'}` renders it again)")
    return 0
