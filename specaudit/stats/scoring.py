"""Teacher-forced scoring of emitted tokens under the warped target (and draft) distribution.

One forward pass of the target over `prompt_token_ids + output_token_ids` gives, for every
emitted token x_t, the distribution p_t the correct sampler should have drawn it from: the
target's logits at that prefix pushed through the SAME `warp(logits, spec)` the run used. All
white-box equivalence statistics (PIT, surprisal martingale, impossible tokens, draft affinity,
TV/KL bounds) are functions of the per-token summaries computed here, so this module is the
only place that touches models on the statistics side.

Batching uses right padding: real tokens keep positions 0..L-1, so default position ids are
right and causal attention never lets a real position see a pad. Scores therefore do not
depend on the batch (checked in tests to float tolerance).
"""

from __future__ import annotations

import math
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from specaudit.decoding.verify import mass_before
from specaudit.decoding.warping import Prefix, SamplingSpec, warp
from specaudit.errors import InputError
from specaudit.models._chunked import head_logits, last_hidden_states, plain_head
from specaudit.stats.plugin_tv import expected_plugin_tv

# A batch whose logits (all models, float32) would take more than this is scored from hidden states,
# one record's logits at a time. Below it the whole batch's logits are made at once, as always:
# the same bits as before chunking existed (a record's logits made alone round differently in the
# last bit, which breaks exact ties between identical sequences that rank tests rely on).
LOGITS_BUDGET_BYTES = 2 << 30

TARGET_COLUMNS = ("p", "cdf_below", "surprisal", "entropy", "surprisal_var", "p_min")
DRAFT_COLUMNS = ("q", "q_mean", "q_var", "beta")
ID_COLUMNS = ("key", "prompt_id", "engine", "sample", "position", "token")
# True where an emitted token has probability 0 under the warped target yet would be kept with its
# logit raised by the scoring model's `boundary_rel_tolerance` x max|logit|: a token the engine's
# own numbers put just inside a truncation (top-k, top-p, min-p) that the scorer's put just outside.
BOUNDARY_COLUMN = "near_boundary"
ATTRIBUTE_PREFIX = "attr."


@dataclass(frozen=True)
class TokenScores:
    """Per-token scores of emitted sequences (one row per emitted token) and per-position mass.

    `tokens` columns:
      key, prompt_id, engine, sample, position, token   identify the token;
      p             warped target probability p_t(x_t);
      cdf_below     F_t(x_t−): target mass of the tokens ordered before x_t (descending p_t,
                    ties by ascending token id; an order that never depends on x_t, so the
                    randomised PIT stays exact);
      surprisal     −log p_t(x_t) (inf for an impossible token);
      entropy       H_t = E_{p_t}[−log p_t] (0·log 0 = 0);
      surprisal_var Var_{p_t}(−log p_t);
      p_min         smallest non-zero p_t (for KL bounds);
      q, q_mean, q_var, beta   with a draft: q_t(x_t), E_{p_t}[q_t], Var_{p_t}(q_t),
                    β_t = Σ min(p_t, q_t) (NaN without a draft);
      attr.<dim>    the record's prompt attributes, for grouping.

    `position_mass` has one row per (prompt_id, engine, position, token) for tokens emitted at
    that position by some record of that prompt and engine: `count` (how many records emitted
    it there), `target_mass` (Σ over records reaching the position of p_t(token)), `n_reached`
    and `n_records`. That is all the equivalence bounds need to compare the empirical
    distribution at a position with the target's, without storing whole p_t vectors.

    `monte_carlo_null` maps a statistic's name ("surprisal"; "draft_affinity" with a draft) to,
    per record key, draws of that statistic's numerator over the record's possible tokens with
    every X_t drawn afresh from its scored p_t (`monte_carlo_null_draws`): Σ_t (−log p_t(X_t) − H_t)
    and Σ_t (q_t(X_t) − E_{p_t}[q_t]). Summed per record, so that any union of records (a prompt, a
    group, everything) gets its null by adding rows. None where the full p_t was not available.
    """

    tokens: pd.DataFrame
    position_mass: pd.DataFrame
    spec: SamplingSpec | None = None
    monte_carlo_null: Mapping[str, Mapping[str, np.ndarray]] | None = None
    first_token_null: Mapping[str, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def has_draft(self) -> bool:
        return "q" in self.tokens and bool(self.tokens["q"].notna().any())

    @property
    def engines(self) -> list[str]:
        return sorted(self.tokens["engine"].unique().tolist())

    def select(self, *, engine: str | None = None, prompt_ids: Iterable[str] | None = None) -> TokenScores:
        """The scores of one engine and/or a subset of prompts."""
        tokens, mass = self.tokens, self.position_mass
        if engine is not None:
            tokens, mass = tokens[tokens["engine"] == engine], mass[mass["engine"] == engine]
        if prompt_ids is not None:
            wanted = set(prompt_ids)
            tokens = tokens[tokens["prompt_id"].isin(wanted)]
            mass = mass[mass["prompt_id"].isin(wanted)]
        null = self.monte_carlo_null
        if null is not None:
            keys = set(tokens["key"].unique().tolist())  # .unique(): iterating an arrow column is slow
            null = {name: {key: draws for key, draws in per_record.items() if key in keys} for name, per_record in null.items()}
        first = self.first_token_null
        if first is not None:
            kept = set(tokens["prompt_id"].unique().tolist())
            first = {pid: curve for pid, curve in first.items() if pid in kept}
        return TokenScores(tokens.reset_index(drop=True), mass.reset_index(drop=True), self.spec, null, first)


# ----------------------------------------------------------------------------- per-token maths
def token_statistics(
    target_probs: torch.Tensor | np.ndarray,
    tokens: torch.Tensor | np.ndarray | Sequence[int],
    draft_probs: torch.Tensor | np.ndarray | None = None,
    *,
    chunk_elements: int = 1 << 22,
) -> dict[str, np.ndarray]:
    """Per-token summaries of warped distributions `target_probs` [N, V] at emitted `tokens` [N].

    Returns float64 arrays keyed by TARGET_COLUMNS (and DRAFT_COLUMNS when `draft_probs` [N, V]
    is given). Works on any device; rows are processed in chunks of about `chunk_elements`
    probabilities, so temporaries stay around 32 MB whatever the vocabulary size.
    """
    target = torch.as_tensor(target_probs)
    if target.ndim != 2:
        raise InputError(f"target_probs must be a 2-D [tokens, vocab] array, got shape {tuple(target.shape)}")
    index = torch.as_tensor(tokens, dtype=torch.long, device=target.device).reshape(-1)
    if index.shape[0] != target.shape[0]:
        raise InputError(f"got {index.shape[0]} tokens for {target.shape[0]} distributions; pass one token per row")
    draft = None if draft_probs is None else torch.as_tensor(draft_probs, device=target.device)
    if draft is not None and draft.shape != target.shape:
        raise InputError(
            f"draft distributions have shape {tuple(draft.shape)} but target ones {tuple(target.shape)}; "
            "target and draft must share the vocabulary"
        )
    columns = TARGET_COLUMNS + (DRAFT_COLUMNS if draft is not None else ())
    parts: dict[str, list[np.ndarray]] = {name: [] for name in columns}
    chunk_rows = max(1, chunk_elements // max(1, target.shape[-1]))
    for lo in range(0, target.shape[0], chunk_rows):
        hi = min(lo + chunk_rows, target.shape[0])
        chunk = _chunk_statistics(target[lo:hi], index[lo:hi], None if draft is None else draft[lo:hi])
        for name in columns:
            parts[name].append(chunk[name])
    return {name: (np.concatenate(parts[name]) if parts[name] else np.zeros(0)) for name in columns}


# Draws of the Monte Carlo nulls per record: the smallest attainable p-value is
# 1 / (NULL_DRAWS + 1) ≈ 5e-4, below the Holm thresholds of the battery at alpha = 0.05.
NULL_DRAWS = 2000


def monte_carlo_null_draws(
    target_probs: torch.Tensor | np.ndarray,
    tokens: torch.Tensor | np.ndarray | Sequence[int],
    n_draws: int = NULL_DRAWS,
    *,
    draft_probs: torch.Tensor | np.ndarray | None = None,
    seed: int = 0,
    chunk_elements: int = 1 << 22,
) -> dict[str, np.ndarray]:
    """``n_draws`` draws of the per-token sums the surprisal and draft-affinity tests are built
    on, X_t ~ p_t independently at every row of ``target_probs`` [N, V] whose emitted token is
    possible (p_t(x_t) > 0; impossible tokens are left out of the statistics, so out of their
    nulls too): "surprisal" Σ_t (−log p_t(X_t) − H_t) and, with ``draft_probs`` [N, V],
    "draft_affinity" Σ_t (q_t(X_t) − E_{p_t}[q_t]), both from the same X draws.

    Under H0 each emitted x_t is a draw from p_t, so these are the distributions of the observed
    sums given the scored distributions: they keep the heavy tails that rare tokens give each
    term (a surprisal of 14 nats; a near-certain draft token missed), which the normal
    approximation loses. The rows' prefixes, hence p_t and q_t, are held at the observed ones
    (the sums' conditional law; the martingale CLT conditions the same way). Seeded, one
    generator per call, so a record's draws never depend on its batch-mates.
    """
    target = torch.as_tensor(target_probs)
    index = torch.as_tensor(tokens, dtype=torch.long, device=target.device).reshape(-1)
    draft = None if draft_probs is None else torch.as_tensor(draft_probs, device=target.device)
    generator = torch.Generator(device=target.device).manual_seed(int(seed))
    totals = {name: torch.zeros(n_draws, dtype=torch.float64, device=target.device) for name in ("surprisal", "draft_affinity")}
    chunk_rows = max(1, chunk_elements // max(1, target.shape[-1]))
    for lo in range(0, target.shape[0], chunk_rows):
        p = _normalise(target[lo : lo + chunk_rows])
        possible = p.gather(1, index[lo : lo + chunk_rows, None]).squeeze(1) > 0
        if not bool(possible.any()):
            continue
        p = p[possible]
        entropy = -torch.xlogy(p, p).sum(dim=1)
        draws = torch.multinomial(p, n_draws, replacement=True, generator=generator)  # [rows, n_draws]
        totals["surprisal"] += (-torch.log(p.gather(1, draws)) - entropy[:, None]).sum(dim=0)
        if draft is not None:
            q = _normalise(draft[lo : lo + chunk_rows])[possible]
            q_mean = (p * q).sum(dim=1)
            totals["draft_affinity"] += (q.gather(1, draws) - q_mean[:, None]).sum(dim=0)
    names = ("surprisal", "draft_affinity") if draft is not None else ("surprisal",)
    return {name: totals[name].cpu().numpy() for name in names}


def _normalise(probs: torch.Tensor) -> torch.Tensor:
    # float64 and renormalised: warp() returns float32 sums that are 1 only to ~1e-7, and the PIT
    # must stay inside [0, 1]. Zeros stay exactly zero, so impossibility is preserved.
    probs = probs.to(torch.float64)
    return probs / probs.sum(dim=-1, keepdim=True)


def _chunk_statistics(target: torch.Tensor, tokens: torch.Tensor, draft: torch.Tensor | None) -> dict[str, np.ndarray]:
    p = _normalise(target)
    vocab = p.shape[-1]
    if int(tokens.min()) < 0 or int(tokens.max()) >= vocab:
        raise InputError(f"emitted token id outside the vocabulary [0, {vocab}); records and model do not match")
    cdf_below, p_x = mass_before(p, tokens)
    entropy = -torch.xlogy(p, p).sum(dim=1)
    log_p = torch.log(p)
    centred = torch.where(p > 0, -log_p - entropy[:, None], torch.zeros((), dtype=p.dtype, device=p.device))
    surprisal_var = (p * centred.square()).sum(dim=1)
    p_min = torch.where(p > 0, p, torch.full((), math.inf, dtype=p.dtype, device=p.device)).min(dim=1).values
    out = {
        "p": p_x,
        "cdf_below": cdf_below,
        "surprisal": -torch.log(p_x),
        "entropy": entropy,
        "surprisal_var": surprisal_var,
        "p_min": p_min,
    }
    if draft is not None:
        q = _normalise(draft)
        q_mean = (p * q).sum(dim=1)
        out["q"] = q.gather(1, tokens[:, None]).squeeze(1)
        out["q_mean"] = q_mean
        out["q_var"] = (p * (q - q_mean[:, None]).square()).sum(dim=1)
        out["beta"] = torch.minimum(p, q).sum(dim=1)
    return {name: value.detach().cpu().numpy() for name, value in out.items()}


# ----------------------------------------------------------------------------- records
def _field(record: Any, name: str, default: Any = None) -> Any:
    if isinstance(record, Mapping):
        return record.get(name, default)
    return getattr(record, name, default)


def _audited(records: Iterable[Any]) -> list[Any]:
    """Records whose outputs the statistics may use (latency-protocol repeats are left out)."""
    return [r for r in records if not _field(r, "timing_only", False)]


def _spec_of(record: Any) -> SamplingSpec:
    sampling = _field(record, "sampling")
    if sampling is None:
        raise InputError(f"record {_field(record, 'key')!r} has no 'sampling' field; pass spec= explicitly")
    if isinstance(sampling, SamplingSpec):
        return sampling
    return SamplingSpec.from_dict(sampling)


def _resolve_spec(spec: SamplingSpec | None, records: Sequence[Any]) -> SamplingSpec:
    if spec is not None:
        return spec
    specs = {_spec_of(r) for r in records}
    if len(specs) != 1:
        raise InputError(
            f"records were decoded with {len(specs)} different sampling settings; score each setting separately or pass spec= explicitly"
        )
    return specs.pop()


def _model_device(model: torch.nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


def _batched_logits(
    models: Sequence[torch.nn.Module],
    sequences: Sequence[Sequence[int]],
    *,
    batch_size: int,
    device: torch.device,
    starts: Sequence[int] | None = None,
    chunked: bool | None = None,
) -> Iterator[tuple[int, list[torch.Tensor]]]:
    """Yield (sequence index, [logits [len - start, V] of each model]) for every sequence, from
    position `starts[i]` on (default 0).

    Longest first, so each batch pads little; right padding, so positions are untouched. With
    `starts` and models whose logits are a plain output layer of their hidden states, each model's
    hidden states are kept for the batch and the logits made one sequence at a time (`chunked`;
    None: when the batch's logits would pass LOGITS_BUDGET_BYTES): at a real vocabulary a batch's
    logits of both models at once are gigabytes.
    """
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
    modes = [m.training for m in models]
    for m in models:
        m.eval()  # dropout would make scores random
    try:
        with torch.inference_mode():
            for lo in range(0, len(order), batch_size):
                batch = order[lo : lo + batch_size]
                width = len(sequences[batch[0]])
                input_ids = torch.zeros((len(batch), width), dtype=torch.long)
                attention = torch.zeros((len(batch), width), dtype=torch.long)
                for row, i in enumerate(batch):
                    seq = sequences[i]
                    input_ids[row, : len(seq)] = torch.as_tensor(list(seq), dtype=torch.long)
                    attention[row, : len(seq)] = 1
                input_ids, attention = input_ids.to(device), attention.to(device)
                vocab = sum(int(getattr(getattr(m, "config", None), "vocab_size", 0) or 0) for m in models)  # 0: not a transformers model
                too_large = len(batch) * width * vocab * 4 > LOGITS_BUDGET_BYTES
                if starts is not None and (too_large if chunked is None else chunked) and all(plain_head(m) for m in models):
                    hidden = [last_hidden_states(m, input_ids, attention_mask=attention, use_cache=False) for m in models]
                    for row, i in enumerate(batch):
                        yield i, [head_logits(m, h[row, starts[i] : len(sequences[i])]) for m, h in zip(models, hidden)]
                    continue
                logits = [m(input_ids=input_ids, attention_mask=attention, use_cache=False).logits for m in models]
                for row, i in enumerate(batch):
                    yield i, [out[row, (starts[i] if starts is not None else 0) : len(sequences[i])] for out in logits]
    finally:
        for m, mode in zip(models, modes):
            m.train(mode)


def score_records(
    model: torch.nn.Module,
    records: Iterable[Any],
    spec: SamplingSpec | None = None,
    *,
    draft_model: torch.nn.Module | None = None,
    draft_plant: Any = None,
    batch_size: int = 8,
    device: str | torch.device | None = None,
    max_mass_position: int = 64,
    null_draws: int = NULL_DRAWS,
    chunked: bool | None = None,
    boundary_tolerance: float | None = None,
) -> TokenScores:
    """Teacher-force `model` over each record's prompt + output and score every emitted token.

    `spec` is the warping the run used (None: read it from the records, which must agree).
    With `draft_model`, the draft is scored under the same spec (q_t, E_p[q], Var_p(q), β_t);
    `draft_plant` (a models.DisparityPlant) mixes its logits on the records of the planted group,
    as the engine and the screen did.
    Records flagged `timing_only` are skipped. `position_mass` is collected for positions
    < `max_mass_position` (its size grows with samples² per prompt and position).
    `null_draws` draws of the surprisal (and, with a draft, draft-affinity) statistic's Monte
    Carlo null are kept per record (0: none, and those tests fall back to their normal
    approximation). `chunked` makes each model's logits one record at a time from its hidden
    states, where the model allows it (None, the default: when a batch's logits would pass
    LOGITS_BUDGET_BYTES); the scores are the same to float rounding (tests/stats check it).
    `boundary_tolerance` (None: the model's `boundary_rel_tolerance`, else 0) marks an emitted token
    of probability 0 as near_boundary when raising its logit by that much times its row's
    max |logit| would keep it (BOUNDARY_COLUMN).
    """
    if boundary_tolerance is None:
        boundary_tolerance = float(getattr(model, "boundary_rel_tolerance", 0.0))
    rows = _audited(records)
    if not rows:
        raise InputError("no records to score (all missing or timing_only); run the audit first")
    spec = _resolve_spec(spec, rows)
    device = torch.device(device) if device is not None else _model_device(model)
    models = [model] + ([draft_model] if draft_model is not None else [])

    prompts, outputs = [], []
    for r in rows:
        prompt = list(_field(r, "prompt_token_ids") or [])
        if not prompt:
            raise InputError(
                f"record {_field(r, 'key')!r} has an empty prompt_token_ids; the first token needs a "
                "prefix to be scored (encode the prompt with its BOS token)"
            )
        prompts.append(prompt)
        outputs.append(list(_field(r, "output_token_ids") or []))

    mass_plan = _MassPlan(rows, outputs, max_mass_position)
    todo = [i for i in range(len(rows)) if outputs[i]]
    # Inputs stop before the last emitted token: nothing is predicted after it.
    sequences = [prompts[i] + outputs[i][:-1] for i in todo]
    vocab_sizes: set[int] = set()
    columns: dict[int, dict[str, np.ndarray]] = {}
    null: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
    first_token_null: dict[str, np.ndarray] = {}
    starts = [len(prompts[i]) - 1 for i in todo]
    for j, rows_logits in _batched_logits(models, sequences, batch_size=batch_size, device=device, starts=starts, chunked=chunked):
        i = todo[j]
        vocab_sizes.update(int(out.shape[-1]) for out in rows_logits)
        if len(vocab_sizes) > 1:
            raise InputError(
                f"target and draft have different vocabulary sizes {sorted(vocab_sizes)}; the draft must share the target's vocabulary"
            )
        tokens = torch.as_tensor(outputs[i], dtype=torch.long, device=rows_logits[0].device)
        if int(tokens.max()) >= rows_logits[0].shape[-1] or int(tokens.min()) < 0:
            raise InputError(
                f"record {_field(rows[i], 'key')!r} has a token id outside the model's vocabulary "
                f"[0, {rows_logits[0].shape[-1]}); score it with the model that produced it"
            )
        # Position t's prefix is the prompt and outputs[:t]: penalties are counted along the record's own path.
        prefix = Prefix(prompts[i], outputs[i][:-1])
        target = warp(rows_logits[0], spec, prefix)
        draft = None
        if draft_model is not None:
            draft_logits = rows_logits[1]
            if draft_plant is not None and draft_plant.applies_to(_field(rows[i], "attributes")):
                draft_logits = draft_plant.mix(draft_logits, draft_logits.shape[-1])
            draft = warp(draft_logits, spec, prefix)
        columns[i] = token_statistics(target, tokens, draft)
        columns[i][BOUNDARY_COLUMN] = _near_boundary(rows_logits[0], target, tokens, spec, prefix, boundary_tolerance)
        if null_draws:
            key = str(_field(rows[i], "key"))
            # float32 storage: 8 kB per record and statistic at 2,000 draws; the sums need no more precision.
            draws = monte_carlo_null_draws(target, tokens, null_draws, draft_probs=draft, seed=zlib.crc32(key.encode()))
            for name, values in draws.items():
                null[name][key] = values.astype(np.float32)
        mass_plan.add(i, target)
        prompt_id = str(_field(rows[i], "prompt_id"))
        if prompt_id not in first_token_null:  # position 0's prefix is the prompt: one distribution per prompt
            first_token_null[prompt_id] = expected_plugin_tv(_normalise(target[:1])[0].cpu().numpy())

    tokens_frame = _token_frame(rows, outputs, columns, has_draft=draft_model is not None)
    return TokenScores(tokens_frame, mass_plan.frame(), spec, dict(null) if null_draws else None, first_token_null)


def _near_boundary(
    logits: torch.Tensor, target: torch.Tensor, tokens: torch.Tensor, spec: SamplingSpec, prefix: Prefix, tolerance: float
) -> np.ndarray:
    """[N] bool: emitted tokens of probability 0 under `target` [N, V] (= warp(logits [N, V], spec,
    prefix)) that the same warp keeps once their raw logit is raised by `tolerance` x max|logit| of
    their row. Each such row is warped again alone, at its own prefix; there are few of them."""
    flags = np.zeros(tokens.shape[0], dtype=bool)
    if tolerance <= 0:
        return flags
    p_emitted = target.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    for t in torch.nonzero(p_emitted <= 0).flatten().tolist():
        row = logits[t : t + 1].clone()
        token = int(tokens[t])
        row[0, token] += tolerance * float(row.abs().max())
        raised = warp(row, spec, Prefix(prefix.prompt, list(prefix.output[:t])))
        flags[t] = bool(raised[0, token] > 0)
    return flags


def _token_frame(
    rows: Sequence[Any], outputs: Sequence[list[int]], columns: Mapping[int, dict[str, np.ndarray]], *, has_draft: bool
) -> pd.DataFrame:
    dims = sorted({d for r in rows for d in (_field(r, "attributes") or {})})
    pieces = []
    for i, r in enumerate(rows):
        if i not in columns:
            continue
        n = len(outputs[i])
        piece: dict[str, Any] = {
            "key": [str(_field(r, "key"))] * n,
            "prompt_id": [str(_field(r, "prompt_id"))] * n,
            "engine": [str(_field(r, "engine"))] * n,
            "sample": np.full(n, int(_field(r, "sample", 0) or 0)),
            "position": np.arange(n),
            "token": np.asarray(outputs[i], dtype=np.int64),
        }
        piece.update(columns[i])
        attributes = _field(r, "attributes") or {}
        for d in dims:
            piece[ATTRIBUTE_PREFIX + d] = [attributes.get(d)] * n
        pieces.append(pd.DataFrame(piece))
    names = list(ID_COLUMNS) + list(TARGET_COLUMNS) + list(DRAFT_COLUMNS) + [BOUNDARY_COLUMN] + [ATTRIBUTE_PREFIX + d for d in dims]
    if not pieces:
        return pd.DataFrame({name: [] for name in names})
    frame = pd.concat(pieces, ignore_index=True)
    if not has_draft:
        for name in DRAFT_COLUMNS:
            frame[name] = np.nan
    if BOUNDARY_COLUMN not in frame:  # scored from logprobs: no logits to judge a boundary by
        frame[BOUNDARY_COLUMN] = False
    return frame[names]


class _MassPlan:
    """Collects Σ_records p_t(x) for the tokens x emitted at each (prompt, engine, position).

    Which tokens are needed is known from the records before any model runs, so every record's
    pass only gathers a few entries of p_t instead of keeping whole distributions.
    """

    def __init__(self, rows: Sequence[Any], outputs: Sequence[list[int]], max_position: int) -> None:
        emitted: dict[tuple[str, str, int], Counter] = defaultdict(Counter)
        reached: Counter = Counter()
        self.n_records: Counter = Counter()
        self.group = []
        for r, out in zip(rows, outputs):
            g = (str(_field(r, "prompt_id")), str(_field(r, "engine")))
            self.group.append(g)
            self.n_records[g] += 1
            for t, token in enumerate(out[:max_position]):
                emitted[(*g, t)][int(token)] += 1
                reached[(*g, t)] += 1
        self.entries: list[tuple[str, str, int, int, int]] = []
        self.index: dict[tuple[str, str, int], tuple[np.ndarray, np.ndarray]] = {}
        for (pid, eng, t), counts in sorted(emitted.items()):
            toks = np.asarray(sorted(counts), dtype=np.int64)
            first = len(self.entries)
            self.entries.extend((pid, eng, t, int(x), counts[x]) for x in toks)
            self.index[(pid, eng, t)] = (toks, np.arange(first, first + len(toks)))
        self.reached = reached
        self.mass = np.zeros(len(self.entries))
        self.max_position = max_position
        self.lengths = [min(len(out), max_position) for out in outputs]

    def add(self, i: int, target: torch.Tensor) -> None:
        pid, eng = self.group[i]
        rows, cols, slots = [], [], []
        for t in range(self.lengths[i]):
            toks, ids = self.index[(pid, eng, t)]
            rows.append(np.full(len(toks), t))
            cols.append(toks)
            slots.append(ids)
        if not rows:
            return
        r = torch.as_tensor(np.concatenate(rows), device=target.device)
        c = torch.as_tensor(np.concatenate(cols), device=target.device)
        probs = _normalise(target[: self.lengths[i]])
        np.add.at(self.mass, np.concatenate(slots), probs[r, c].cpu().numpy())

    def frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(self.entries, columns=["prompt_id", "engine", "position", "token", "count"])
        frame["target_mass"] = self.mass
        keys = list(zip(frame["prompt_id"], frame["engine"], frame["position"]))
        frame["n_reached"] = [self.reached[k] for k in keys]
        frame["n_records"] = [self.n_records[k[:2]] for k in keys]
        return frame


# ----------------------------------------------------------------------------- greedy support
def logit_gaps(
    model: torch.nn.Module,
    prefixes: Sequence[Sequence[int]],
    first: Sequence[int],
    second: Sequence[int],
    *,
    batch_size: int = 8,
    device: str | torch.device | None = None,
) -> pd.DataFrame:
    """Raw (unwarped) target logits after each prefix, compared between two candidate tokens.

    Returns one row per prefix: logit_first, logit_second, gap = |logit_first − logit_second|,
    top2_gap (largest minus second-largest logit) and scale (max |logit|, the magnitude that
    floating-point rounding error grows with).
    """
    if not (len(prefixes) == len(first) == len(second)):
        raise InputError("logit_gaps needs one first and one second token per prefix")
    if any(len(p) == 0 for p in prefixes):
        raise InputError("logit_gaps got an empty prefix; include the prompt tokens")
    device = torch.device(device) if device is not None else _model_device(model)
    out = np.full((len(prefixes), 5), np.nan)
    for i, (logits,) in _batched_logits([model], prefixes, batch_size=batch_size, device=device):
        last = logits[-1].to(torch.float64)
        top2 = torch.topk(last, 2).values if last.shape[0] >= 2 else torch.stack([last[0], last[0]])
        a, b = float(last[int(first[i])]), float(last[int(second[i])])
        out[i] = [a, b, abs(a - b), float(top2[0] - top2[1]), float(last.abs().max())]
    return pd.DataFrame(out, columns=["logit_first", "logit_second", "gap", "top2_gap", "scale"])


__all__ = [
    "BOUNDARY_COLUMN",
    "DRAFT_COLUMNS",
    "TARGET_COLUMNS",
    "TokenScores",
    "logit_gaps",
    "score_records",
    "token_statistics",
]
