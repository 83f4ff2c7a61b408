"""Speed-up predicted from a measured cost model, for prompts the engines did not time.

The screen gives, for every prompt, the steps and draft proposals a speculative run would make
(expected counts along a target sample, specaudit.engines.screen). The engines time a stratified subset
of those prompts. This module fits how long each kind of work takes on that subset and predicts
the wall time of vanilla and speculative decoding for every screened prompt.

Terms, per record of the engine subset (seconds; P prompt tokens, T output tokens, S verification
steps, D drafted tokens):

    vanilla wall      = a_v + b_v·P + c_v·T           (prefill, then one target pass per token;
                                                       fitted as time to first token = a_v + b_v·P + c_v
                                                       and the rest = c_v·(T − 1), because T is
                                                       nearly constant at the length budget)
    speculative draft = a_d + b_d·P + c_d·D           (draft prefill, then one draft pass per token)
    speculative rest  = a_s + b_s·P + c_s·S           (target prefill, one verification per step, overhead)

Each line is a least-squares fit, with costs constrained to be ≥ 0, over the timed records (draft_s and wall_s − draft_s of
the speculative engine; wall_s of vanilla). D and S enter separate lines because the engines time
drafting and verification apart: within one line they are nearly collinear (D ≈ k·S). The model is
linear in S and D, so the expected counts of the screen give the expected wall time.

Validation is out of sample: each timed prompt's speed-up is predicted from a fit without that
prompt (leave one prompt out) and compared with its measured paired speed-up. The ratio measured /
predicted, with a paired Fieller interval over prompts (stats.disparity.intervals), says how far to trust the predictions; an
interval that excludes 1 is a finding in itself (the cost model misses something, e.g. a context
length the subset did not cover).

Per group (`validate_groups`), each group's timed prompts are compared with all the other timed
prompts: a group whose log(measured / predicted) lies outside the others' spread is a finding
(the model misses something about that group). The others' variance alone scales the test, so a
group with one timed prompt is tested too (a prediction interval for a new prompt); Holm runs
over every group of every dimension. A group with one timed prompt is only reported: that one
timing's glitch and a group effect look the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy import stats

from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.stats._results import holm
from specaudit.stats.disparity.intervals import ratio_interval

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

# A line needs more records than coefficients to be fitted at all; below this it is not.
MIN_TIMED_PROMPTS = 4
# A group's misprediction is a finding only over this many timed prompts: one prompt's timing can
# be off by itself (validate_groups).
MIN_TIMED_PER_GROUP = 2


@dataclass(frozen=True)
class CostModel:
    """Coefficients (seconds) of the three lines; see the module docstring."""

    vanilla: tuple[float, float, float]  # a_v, b_v per prompt token, c_v per output token
    draft: tuple[float, float, float]  # a_d, b_d per prompt token, c_d per drafted token
    rest: tuple[float, float, float]  # a_s, b_s per prompt token, c_s per verification step
    n_prompts: int

    def predict(
        self, prompt_tokens: ArrayLike, output_tokens: ArrayLike, steps: ArrayLike, drafted: ArrayLike
    ) -> tuple[np.ndarray, np.ndarray]:
        """(vanilla wall, speculative wall) in seconds for arrays of counts."""
        p, t, s, d = (np.asarray(x, dtype=float) for x in (prompt_tokens, output_tokens, steps, drafted))
        vanilla = self.vanilla[0] + self.vanilla[1] * p + self.vanilla[2] * t
        speculative = self.draft[0] + self.draft[1] * p + self.draft[2] * d + self.rest[0] + self.rest[1] * p + self.rest[2] * s
        return vanilla, speculative

    @property
    def cost_ratio(self) -> float:
        """c: one draft pass per token over one verification step, the speed-up formula's c."""
        return self.draft[2] / self.rest[2] if self.rest[2] > 0 else float("nan")

    def to_dict(self) -> dict:
        names = ("intercept_s", "per_prompt_token_s")
        return {
            CONTROL_ENGINE: {**dict(zip(names, self.vanilla[:2])), "per_output_token_s": self.vanilla[2]},
            "draft": {**dict(zip(names, self.draft[:2])), "per_drafted_token_s": self.draft[2]},
            "verify_and_overhead": {**dict(zip(names, self.rest[:2])), "per_step_s": self.rest[2]},
            "cost_ratio": self.cost_ratio,
            "n_prompts": self.n_prompts,
        }


def timed_prompts(records: pd.DataFrame, engine: str = SPECULATIVE_ENGINE) -> pd.DataFrame:
    """One row per prompt decoded and timed by both `engine` and vanilla: counts and seconds summed
    over its records (timing-only repeats included: they are timed runs of the same prompt)."""
    df = records[records["engine"].isin([engine, CONTROL_ENGINE])].copy()
    df = df[pd.to_numeric(df["wall_s"], errors="coerce") > 0]
    if df.empty:
        return pd.DataFrame()
    df["P"] = df["prompt_token_ids"].map(len).astype(float)
    df["T"] = df["output_token_ids"].map(len).astype(float)
    df["draft_s"] = pd.to_numeric(df.get("draft_s"), errors="coerce").fillna(0.0)
    df["ttft_s"] = pd.to_numeric(df.get("ttft_s"), errors="coerce")
    vanilla = df[df["engine"] == CONTROL_ENGINE].groupby("prompt_id")[["P", "T", "wall_s", "ttft_s"]].sum()
    vanilla["runs"] = df[df["engine"] == CONTROL_ENGINE].groupby("prompt_id").size()
    spec = df[df["engine"] == engine].groupby("prompt_id")[["P", "T", "wall_s", "draft_s", "steps", "proposed"]].sum()
    spec["runs"] = df[df["engine"] == engine].groupby("prompt_id").size()
    return vanilla.join(spec, lsuffix="_v", rsuffix="_s", how="inner").dropna()  # a run without ttft cannot be fitted


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, ...]:
    """Least squares with every coefficient ≥ 0: each is a cost (seconds per thing), and an
    unconstrained fit on a few noisy timings can go negative and predict negative wall times."""
    from scipy.optimize import nnls

    coef, _ = nnls(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    return tuple(float(c) for c in coef)


def fit_cost_model(timed: pd.DataFrame) -> CostModel:
    """Fit the three lines on per-prompt sums (a prompt's runs add up: each line is linear, so the
    intercepts are multiplied by the number of runs)."""
    rv, rs = timed["runs_v"].to_numpy(float), timed["runs_s"].to_numpy(float)
    after_first = (timed["wall_s_v"] - timed["ttft_s"]).to_numpy(float)
    per_token = max(_line(np.column_stack([timed["T_v"] - rv]), after_first)[0], 0.0)
    first = _line(np.column_stack([rv, timed["P_v"]]), timed["ttft_s"].to_numpy(float) - per_token * rv)
    vanilla = (first[0], first[1], per_token)
    draft = _line(np.column_stack([rs, timed["P_s"], timed["proposed"]]), timed["draft_s"].to_numpy(float))
    rest = _line(np.column_stack([rs, timed["P_s"], timed["steps"]]), (timed["wall_s_s"] - timed["draft_s"]).to_numpy(float))
    return CostModel(vanilla, draft, rest, len(timed))


@dataclass(frozen=True)
class CostModelValidation:
    """Measured / predicted speed-up on the timed prompts, each predicted without itself."""

    statistic: float  # mean measured speed-up / mean predicted over the timed prompts
    ci_low: float
    ci_high: float
    n_prompts: int
    per_prompt: pd.DataFrame  # prompt_id -> measured, predicted

    def confidence_interval(self) -> tuple[float, float]:
        return self.ci_low, self.ci_high

    @property
    def holds(self) -> bool:
        """The prediction is not shown wrong: the interval covers 1."""
        return bool(self.ci_low <= 1.0 <= self.ci_high)

    def to_dict(self) -> dict:
        return {
            "measured_over_predicted": {"value": self.statistic, "ci_low": self.ci_low, "ci_high": self.ci_high},
            "n_prompts": self.n_prompts,
            "method": "leave one prompt out; paired Fieller 95% interval over prompts",
            "holds": self.holds,
        }


def validate_cost_model(timed: pd.DataFrame) -> CostModelValidation:
    """Leave-one-prompt-out predictions of each timed prompt's speed-up against its measurement.
    The speed-up is per output token on each side (the engines emit different lengths)."""
    measured = (timed["wall_s_v"] / timed["T_v"]) / (timed["wall_s_s"] / timed["T_s"])
    predicted = np.empty(len(timed))
    for i in range(len(timed)):
        held = timed.drop(index=timed.index[i])
        model = fit_cost_model(held)
        row = timed.iloc[i]
        vanilla, _ = model.predict(row["P_v"] / row["runs_v"], row["T_v"] / row["runs_v"], 0, 0)
        _, speculative = model.predict(
            row["P_s"] / row["runs_s"], row["T_s"] / row["runs_s"], row["steps"] / row["runs_s"], row["proposed"] / row["runs_s"]
        )
        predicted[i] = (vanilla / (row["T_v"] / row["runs_v"])) / (speculative / (row["T_s"] / row["runs_s"]))
    m, p = measured.to_numpy(float), predicted
    ids = timed.index.to_numpy(dtype=object)
    interval = ratio_interval(m, p, x_pairs=ids, y_pairs=ids)
    table = pd.DataFrame({"measured": m, "predicted": p}, index=timed.index)
    return CostModelValidation(interval.ratio, *interval.confidence_interval(), len(m), table)


@dataclass(frozen=True)
class GroupValidation:
    """One group's timed prompts against the other timed prompts (terms: r = log(measured /
    predicted) per prompt; the group's n_g prompts against the rest's n_r)."""

    dimension: str
    group: str
    n_prompts: int  # n_g
    statistic: float  # exp(mean r over the group): its measured / predicted
    others: float  # exp(mean r over the rest)
    pvalue: float  # two-sided t of mean r_g − mean r_r, scaled by the rest's sd · sqrt(1/n_g + 1/n_r), df n_r − 1
    pvalue_holm: float = float("nan")

    def describe(self) -> str:
        return (
            f"{self.dimension}={self.group} {self.statistic:.2f} against {self.others:.2f} "
            f"({self.n_prompts} timed, Holm p = {self.pvalue_holm:.2g})"
        )

    def to_dict(self) -> dict:
        return {
            "n_timed_prompts": self.n_prompts,
            "measured_over_predicted": self.statistic,
            "others": self.others,
            "pvalue": self.pvalue,
            "pvalue_holm": self.pvalue_holm,
        }


def validate_groups(validation: CostModelValidation, groups: dict[str, dict[str, str]]) -> list[GroupValidation]:
    """Each group's measured / predicted against the other timed prompts'; `groups` maps a
    dimension to {prompt_id: group}. Holm-adjusted over every group of every dimension. A group
    needs the rest to hold at least 3 prompts (2 degrees of freedom); otherwise it is left out."""
    table = validation.per_prompt
    r = np.log(table["measured"].to_numpy(float) / table["predicted"].to_numpy(float))
    ids = table.index.to_numpy(dtype=object)
    results = []
    for dimension, labels in groups.items():
        label_of = np.array([labels.get(pid) for pid in ids], dtype=object)
        for group in sorted({g for g in label_of if g is not None}, key=str):
            inside = label_of == group
            mine, rest = r[inside], r[~inside]
            if rest.size < 3:
                continue
            se = rest.std(ddof=1) * np.sqrt(1 / mine.size + 1 / rest.size)
            t = (mine.mean() - rest.mean()) / se if se > 0 else 0.0
            p = float(2 * stats.t.sf(abs(t), df=rest.size - 1))
            results.append(
                GroupValidation(dimension, str(group), int(mine.size), float(np.exp(mine.mean())), float(np.exp(rest.mean())), p)
            )
    adjusted = holm([g.pvalue for g in results]) if results else []
    return [replace(g, pvalue_holm=float(p)) for g, p in zip(results, adjusted, strict=True)]


def step_costs(frame: pd.DataFrame) -> tuple[float, float] | None:
    """(c, v) from an audit's timed records, both per plain decoding step: c = draft time per
    proposed token, v = verification time per step. The prompt pass is left out of both sides (it
    is the first token's time in vanilla and the first step's in speculation), so v says what
    verifying k + 1 tokens costs against emitting one: about 1 on a GPU, near k + 1 on one CPU core
    (the real pair under llama.cpp: c = 0.93, v = 4.3). With both, (1 − α^(k+1)) / ((1 − α)(k·c + v))
    is the speed-up this machine gives; taking v = 1 there overstates it by about v. None without
    vanilla and speculative timings."""
    if not {"wall_s", "ttft_s", "verify_s", "draft_s", "steps", "proposed"} <= set(frame.columns):
        return None
    timed = frame[(pd.to_numeric(frame["wall_s"], errors="coerce") > 0) & pd.to_numeric(frame["ttft_s"], errors="coerce").notna()]
    plain, spec = timed[timed["engine"] == CONTROL_ENGINE], timed[timed["engine"] == SPECULATIVE_ENGINE]
    spec = spec[pd.to_numeric(spec["proposed"], errors="coerce").notna()]  # a drafted count not reported: no cost
    if plain.empty or spec.empty:
        return None
    plain_tokens = plain["output_token_ids"].map(len).sum() - len(plain)
    steps, proposed = pd.to_numeric(spec["steps"]).sum() - len(spec), pd.to_numeric(spec["proposed"]).sum()
    if plain_tokens <= 0 or steps <= 0 or proposed <= 0:
        return None
    per_token = float((plain["wall_s"] - plain["ttft_s"]).sum() / plain_tokens)
    verify = float((spec["verify_s"] - spec["ttft_s"]).sum() / steps)
    if not (per_token > 0 and verify > 0):
        return None
    return float(spec["draft_s"].sum() / proposed) / per_token, verify / per_token
