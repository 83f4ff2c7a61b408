"""Power of the white-box battery against the field mutants at the default audit's budget, per
sampling setting, over many seeds: verification steps replayed on the default pair's own logits.

    python bench/field_power_replay.py --pool-from RUN_DIR [--pool-from RUN_DIR ...]
        [--positions 3000] [--reached 1100] [--seeds 20]
        [--samplers correct,draft_q_before_truncation,...] [--sampling t=1 t=0.7,top_p=0.9]

A default audit decodes 44 prompts x 32 tokens with the speculative engine (about 1,400 tokens,
1,100 drafted positions reached); 20 of them per mutant and setting are days of CPU here. This
replays what the battery sees instead, at the same number of reached drafted positions:

1. positions: `--positions` output positions drawn from the target samples of one or more run
   folders (the screen's records of an audit: prompt and continuation), teacher-forced through
   the target and the int8 draft; their raw logits are kept (float16);
2. per seed, `--reached` positions drawn without replacement, each one verification step with
   k = 1 on the setting's warped p and q (drafted token x ~ q, the sampler's verify function,
   with the raw logits for a field mutant), emitting the accepted draft or the correction; the
   bonus token is not emitted (it would need the target at the drafted prefix);
3. the battery `analyze` runs (`goodness_of_fit`: PIT, step PIT, surprisal, draft affinity,
   acceptance calibration, Holm at alpha) on those tokens and steps, as records of our engine
   carry them. Surprisal and draft affinity take the normal approximation (no Monte Carlo null:
   at this size the two agree, docs/statistics.md).

What differs from an audit: positions are independent (their prefixes are target samples, not
the engine's own outputs); no bonus tokens (about 20% fewer PIT tokens than the audit: a little
less power for the PIT, none less for acceptance, which counts drafted positions). The rate is
the share of seeds rejected, with a Clopper-Pearson 95% interval.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy import stats

from specaudit.decoding.settings import parse_settings, setting_label
from specaudit.decoding.verify import VerifyLogits, sample_from, step_pit, token_acceptance_probabilities
from specaudit.decoding.warping import warp
from specaudit.models import load_pair
from specaudit.selftest.end_to_end import blind_class, e2e_samplers
from specaudit.stats.equivalence import goodness_of_fit
from specaudit.stats.scoring import token_statistics

FIELD = "correct,draft_q_before_truncation,target_default_sampling,greedy_draft,greedy_verification"


def harvest(pair, run_dirs: list[str], positions: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw target and draft logits [N, V] (float16) at every output position of randomly chosen
    sampled sequences of the runs, until about `positions` positions (whole sequences: one
    teacher-forced pass of each model per sequence)."""
    sequences = []
    for folder in run_dirs:
        for line in open(Path(folder) / "records.jsonl", encoding="utf-8"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a run still writing: its torn last line
                continue
            if record.get("output_token_ids") and not record.get("timing_only"):
                sequences.append((record["prompt_token_ids"], record["output_token_ids"]))
    order = np.random.default_rng(seed).permutation(len(sequences))
    target_rows, draft_rows, total = [], [], 0
    with torch.inference_mode():
        for i in order:
            if total >= positions:
                break
            prompt, out = sequences[i]
            ids = torch.tensor([prompt + out[:-1]])
            for model, sink in ((pair.target, target_rows), (pair.draft, draft_rows)):
                sink.append(model(ids).logits[0, len(prompt) - 1 :, : pair.vocab_size].to(torch.float16))
            total += len(out)
    return torch.cat(target_rows), torch.cat(draft_rows)


def warped(logits: torch.Tensor, spec, chunk: int = 256) -> torch.Tensor:
    return torch.cat([warp(logits[i : i + chunk].float(), spec) for i in range(0, logits.shape[0], chunk)])


def replay_audit(target_logits, draft_logits, p_all, q_all, verify, spec, reached: int, seed: int, alpha: float) -> dict:
    """One replayed audit: `reached` k = 1 steps at random positions, judged by the battery."""
    rng = np.random.default_rng(seed)
    index = rng.choice(target_logits.shape[0], size=reached, replace=False)
    generator = torch.Generator().manual_seed(seed)
    wants_logits = bool(getattr(verify, "wants_logits", False))
    records, tokens = [], []
    for n, i in enumerate(index.tolist()):
        p, q = p_all[i : i + 1], q_all[i : i + 1]
        drafted = torch.tensor([sample_from(q[0], generator)])
        target_probs = torch.cat([p, p])  # the bonus row, never emitted here
        if wants_logits:
            t_logits = target_logits[i].float()
            raw = VerifyLogits(spec, draft_logits[i : i + 1].float(), torch.stack([t_logits, t_logits]))
            emitted = verify(drafted, q, target_probs, generator, logits=raw)
        else:
            emitted = verify(drafted, q, target_probs, generator)
        accepted = int(emitted.shape[0] - 1)
        token = int(emitted[0])
        records.append(
            {
                "key": f"replay-{n}|speculative|0",
                "prompt_id": f"replay-{n}",
                "engine": "speculative",
                "k": 1,
                "output_token_ids": [token],
                "accepted_per_step": [accepted],
                "proposed_per_step": [1],
                "proposed": 1,
                "accept_prob": [token_acceptance_probabilities(drafted, q, target_probs).tolist()],
                "step_pit": step_pit(q, target_probs, emitted)[:1],
            }
        )
        tokens.append(token)
    rows = torch.as_tensor(index)
    columns = token_statistics(p_all[rows], torch.tensor(tokens), q_all[rows])
    frame = pd.DataFrame(
        {
            "key": [r["key"] for r in records],
            "prompt_id": [r["prompt_id"] for r in records],
            "engine": "speculative",
            "sample": 0,
            "position": 0,
            "token": tokens,
            **columns,
        }
    )
    gof = goodness_of_fit(frame, records, engine="speculative", by=(), alpha=alpha, seed=seed)
    tests = {row["test"]: row for row in gof.gate.to_dict("records")}
    return {
        "rejected": gof.verdict == "FAIL",
        "pvalue": float(gof.pvalue),
        "caught_by": [name for name, row in tests.items() if row["reject"]] + (["impossible_tokens"] if gof.impossible.statistic else []),
        "acceptance_z": float(gof.tests["acceptance"].statistic) if "acceptance" in gof.tests else np.nan,
        "accept_rate": float(np.mean([r["accepted_per_step"][0] for r in records])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool-from", action="append", required=True, help="run folder whose sampled sequences give the positions")
    parser.add_argument("--positions", type=int, default=3000)
    parser.add_argument("--reached", type=int, default=1100, help="drafted positions reached per audit (the default audit's)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--samplers", default=FIELD)
    parser.add_argument("--sampling", nargs="+", default=["t=1", "t=0.7,top_p=0.9"])
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--csv")
    parser.add_argument("--cache", help="file for the harvested logits: read if it exists, else written (one harvest for several runs)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    pair = load_pair("default", "int8")
    started = time.perf_counter()
    if args.cache and Path(args.cache).exists():
        target_logits, draft_logits = torch.load(args.cache)
    else:
        target_logits, draft_logits = harvest(pair, args.pool_from, args.positions, seed=0)
        if args.cache:
            torch.save((target_logits, draft_logits), args.cache)
    print(f"harvested {target_logits.shape[0]} positions in {time.perf_counter() - started:.0f} s", flush=True)
    samplers = e2e_samplers()
    rows = []
    for spec in parse_settings(args.sampling):
        p_all, q_all = warped(target_logits, spec), warped(draft_logits, spec)
        for name in [s.strip() for s in args.samplers.split(",") if s.strip()]:
            started = time.perf_counter()
            runs = [
                replay_audit(target_logits, draft_logits, p_all, q_all, samplers[name], spec, args.reached, seed, args.alpha)
                for seed in range(args.seeds)
            ]
            rejected = sum(r["rejected"] for r in runs)
            interval = stats.binomtest(rejected, len(runs)).proportion_ci(0.95)
            caught = pd.Series([t for r in runs for t in r["caught_by"]], dtype=object).value_counts()
            rows.append(
                {
                    "sampler": name,
                    "setting": setting_label(spec),
                    "blind_here": blind_class(name, spec) is not None,
                    "rejected": f"{rejected}/{len(runs)}",
                    "rate": rejected / len(runs),
                    "ci_low": interval.low,
                    "ci_high": interval.high,
                    "median_pvalue": float(np.median([r["pvalue"] for r in runs])),
                    "median_acceptance_z": float(np.median([r["acceptance_z"] for r in runs])),
                    "accept_rate": float(np.mean([r["accept_rate"] for r in runs])),
                    "caught_by": ", ".join(f"{t} {c}" for t, c in caught.items()),
                    "seconds_per_audit": (time.perf_counter() - started) / len(runs),
                }
            )
            print(pd.DataFrame(rows[-1:]).to_string(index=False, float_format=lambda x: f"{x:.3g}"), flush=True)
    frame = pd.DataFrame(rows)
    print(frame.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    if args.csv:
        frame.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
