"""GroupFrame: metrics per prompt group, fairlearn-MetricFrame style."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from specaudit.contracts import DEFAULT_BAND, INTERSECTION, METRICS, MIN_CHECKED_PROMPTS, group_label
from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.errors import InputError
from specaudit.stats._bootstrap import Method, Replicates, cluster_replicates
from specaudit.stats._results import holm
from specaudit.stats.disparity._grouping import (
    _as_list,
    _group_codes,
    _group_sums,
    _interval_frame,
    _resolve_reference,
    _weighted_quantile,
)
from specaudit.stats.disparity.intervals import ratio_interval
from specaudit.stats.disparity.per_prompt import per_prompt_metrics
from specaudit.stats.disparity.rank_tests import (
    KruskalResult,
    PairwiseResult,
    kruskal_test,
    pairwise_test,
)

if TYPE_CHECKING:
    from specaudit.stats._bootstrap import BootstrapResult


BEST_SERVED = "best-served"  # the reference method: the group with the highest acceptance
SERVED_BY = ("acceptance_rate", "mean_beta", "per_position_acceptance")


class GroupFrame:
    """Metrics per prompt group, fairlearn-MetricFrame style, with cluster-bootstrap intervals.

    ``GroupFrame(records, sensitive="dialect")`` or ``sensitive=["domain", "dialect"]`` for the
    intersection. Intervals resample prompts within each group (stratified cluster bootstrap,
    seeded); every derived quantity (differences, ratios, minima) uses the same replicates.

    Attributes: ``overall``, ``by_group``, ``per_prompt``, ``groups``; methods ``difference``,
    ``ratio``, ``group_min``, ``group_max``, ``to_reference``, ``kruskal``, ``pairwise``,
    ``flags``, ``warnings``.
    """

    def __init__(
        self,
        records: pd.DataFrame,
        sensitive: str | Sequence[str],
        metrics: Sequence[str] | None = None,
        *,
        engine: str = SPECULATIVE_ENGINE,
        baseline: str = CONTROL_ENGINE,
        n_boot: int = 1000,
        ci: float = 0.95,
        seed: int = 0,
        method: Method = "percentile",
    ) -> None:
        table = per_prompt_metrics(records, engine=engine, baseline=baseline)
        self._setup(table, sensitive, metrics, n_boot=n_boot, ci=ci, seed=seed, method=method)

    @classmethod
    def from_prompts(
        cls,
        per_prompt: pd.DataFrame,
        sensitive: str | Sequence[str],
        metrics: Sequence[str] | None = None,
        *,
        n_boot: int = 1000,
        ci: float = 0.95,
        seed: int = 0,
        method: Method = "percentile",
    ) -> GroupFrame:
        """Build from a ``per_prompt_metrics`` table (saves re-reading records per dimension)."""
        frame = cls.__new__(cls)
        frame._setup(per_prompt, sensitive, metrics, n_boot=n_boot, ci=ci, seed=seed, method=method)
        return frame

    def _setup(
        self,
        table: pd.DataFrame,
        sensitive: str | Sequence[str],
        metrics: Sequence[str] | None,
        *,
        n_boot: int,
        ci: float,
        seed: int,
        method: Method,
    ) -> None:
        self.sensitive = _as_list(sensitive)
        codes, groups = _group_codes(table, self.sensitive)
        if (codes < 0).any():  # prompts outside this dimension do not belong in its overall figures
            table = table[codes >= 0].reset_index(drop=True)
            codes, groups = _group_codes(table, self.sensitive)
        self.per_prompt = table
        self.confidence_level = ci
        self.method = method
        self.groups = groups
        self._codes = codes
        if metrics is None:
            metrics = [m for m, spec in METRICS.items() if table[spec.value_column].notna().any()]
        unknown = [m for m in metrics if m not in METRICS]
        if unknown:
            raise InputError(f"GroupFrame: unknown metric(s) {', '.join(unknown)}; choose from {', '.join(METRICS)}.")
        if not metrics:
            raise InputError("GroupFrame: no metric has data in these records (no accepted/proposed counts or timings).")
        self.metrics = list(metrics)
        n_groups = len(groups)
        onehot = np.zeros((len(table), n_groups))
        onehot[codes >= 0, codes[codes >= 0]] = 1.0
        self._onehot = onehot

        # Per metric: which prompts count, and the (n, c) columns whose weighted sums combine.
        specs = [METRICS[m] for m in self.metrics]
        valid = np.column_stack([table[s.value_column].notna().to_numpy() for s in specs])
        self._valid = valid
        ratio_cols, slices = [], []
        for j, spec in enumerate(specs):
            start = sum(len(c) for c in ratio_cols)
            if spec.quantile is None:
                block = [np.where(valid[:, j], table[c].to_numpy(dtype=float), 0.0) for c in spec.sums]
                ratio_cols.append(block)
                slices.append(slice(start, start + len(block)))
            else:
                slices.append(None)
        columns = np.column_stack([c for block in ratio_cols for c in block]) if ratio_cols else np.zeros((len(table), 0))
        quantile_values = {}
        for j, spec in enumerate(specs):
            if spec.quantile is not None:
                per_group = []
                for g in range(n_groups + 1):
                    members = valid[:, j] & ((codes == g) if g < n_groups else True)
                    idx = np.flatnonzero(members)
                    values = table[spec.value_column].to_numpy(dtype=float)[idx]
                    order = np.argsort(values, kind="stable")
                    per_group.append((idx[order], values[order]))
                quantile_values[j] = per_group

        def statistic(weights: np.ndarray) -> np.ndarray:
            out = np.full((len(weights), n_groups + 1, len(specs)), np.nan)
            sums = _group_sums(weights, onehot, columns) if columns.shape[1] else None
            with np.errstate(all="ignore"):
                for j, spec in enumerate(specs):
                    if spec.quantile is None:
                        parts = [sums[:, :, i] for i in range(slices[j].start, slices[j].stop)]
                        value = spec.combine(*parts)
                        # An empty group (zero weight) gives 0/0; keep it NaN, never inf.
                        out[:, :, j] = np.where(np.isfinite(value), value, np.nan)
                    else:
                        for g, (idx, values) in enumerate(quantile_values[j]):
                            out[:, g, j] = _weighted_quantile(values, weights[:, idx], spec.quantile)
            return out

        strata = np.where(codes >= 0, codes, n_groups)
        self._replicates: Replicates = cluster_replicates(
            statistic, len(table), strata=strata, n_boot=n_boot, seed=seed, jackknife=(method == "bca")
        )
        self._interval = self._replicates.interval(ci, method)
        token_counts = np.column_stack([table[s.token_column].to_numpy(dtype=float) for s in specs])
        member = np.column_stack([onehot, np.ones(len(table))])  # (n, G + 1)
        self._n_prompts = member.T @ valid.astype(float)  # (G + 1, M)
        self._n_tokens = member.T @ np.where(valid, token_counts, 0.0)
        # Prompts are resampled within their group, so a group of one prompt has no interval (every
        # replicate is that prompt), nor has the overall figure when every group holds one prompt.
        single = self._n_prompts < 2
        single[n_groups] = (self._n_prompts[:n_groups] < 2).all(axis=0)
        if single.any():
            interval = self._interval
            self._interval = replace(
                interval, ci_low=np.where(single, np.nan, interval.ci_low), ci_high=np.where(single, np.nan, interval.ci_high)
            )

    # ---- tables -------------------------------------------------------------------------------

    def _group_index(self) -> pd.Index:
        if len(self.sensitive) > 1:
            return pd.MultiIndex.from_tuples(self.groups, names=self.sensitive)
        return pd.Index(self.groups, name=self.sensitive[0])

    @property
    def overall(self) -> pd.DataFrame:
        """One row per metric: value, ci_low, ci_high, n_prompts, n_tokens over all prompts."""
        g = len(self.groups)
        return pd.DataFrame(
            {
                "value": self._interval.statistic[g],
                "ci_low": self._interval.ci_low[g],
                "ci_high": self._interval.ci_high[g],
                "n_prompts": self._n_prompts[g].astype(int),
                "n_tokens": self._n_tokens[g].astype(int),
            },
            index=pd.Index(self.metrics, name="metric"),
        )

    @property
    def by_group(self) -> pd.DataFrame:
        """Rows: groups. Columns: (metric, value | ci_low | ci_high | n_prompts | n_tokens)."""
        g = len(self.groups)
        blocks = {}
        for j, metric in enumerate(self.metrics):
            blocks[metric] = pd.DataFrame(
                {
                    "value": self._interval.statistic[:g, j],
                    "ci_low": self._interval.ci_low[:g, j],
                    "ci_high": self._interval.ci_high[:g, j],
                    "n_prompts": self._n_prompts[:g, j].astype(int),
                    "n_tokens": self._n_tokens[:g, j].astype(int),
                },
                index=self._group_index(),
            )
        return pd.concat(blocks, axis=1, names=["metric", "stat"])

    def _derived(self, fn: Callable[[np.ndarray], np.ndarray]) -> pd.DataFrame:
        result = self._replicates.map(fn).interval(self.confidence_level, self.method)
        return _interval_frame(result, pd.Index(self.metrics, name="metric"))

    def _groups_only(self, values: np.ndarray) -> np.ndarray:
        return values[:, : len(self.groups), :]

    def difference(self, method: str = "between_groups") -> pd.DataFrame:
        """Per metric: max − min over groups ("between_groups"), or the largest |group − overall|
        ("to_overall"); with bootstrap intervals."""
        g = len(self.groups)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if method == "between_groups":
                return self._derived(lambda v: np.nanmax(v[:, :g], axis=1) - np.nanmin(v[:, :g], axis=1))
            if method == "to_overall":
                return self._derived(lambda v: np.nanmax(np.abs(v[:, :g] - v[:, g : g + 1]), axis=1))
        raise InputError(f"GroupFrame.difference: method must be 'between_groups' or 'to_overall', got {method!r}.")

    def ratio(self, method: str = "between_groups") -> pd.DataFrame:
        """Per metric: min / max over groups ("between_groups"), or the smallest of group/overall
        and overall/group ("to_overall"); 1 is parity. With bootstrap intervals."""
        g = len(self.groups)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if method == "between_groups":
                return self._derived(lambda v: np.nanmin(v[:, :g], axis=1) / np.nanmax(v[:, :g], axis=1))
            if method == "to_overall":

                def fn(v: np.ndarray) -> np.ndarray:
                    r = v[:, :g] / v[:, g : g + 1]
                    return np.nanmin(np.minimum(r, 1.0 / r), axis=1)

                return self._derived(fn)
        raise InputError(f"GroupFrame.ratio: method must be 'between_groups' or 'to_overall', got {method!r}.")

    def _extreme(self, pick: Callable) -> pd.DataFrame:
        g = len(self.groups)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            frame = self._derived(lambda v: pick(v[:, :g], axis=1))
        point = self._interval.statistic[:g]
        arg = np.nanargmin if pick is np.nanmin else np.nanargmax
        frame["group"] = [self.groups[int(arg(point[:, j]))] if np.isfinite(point[:, j]).any() else None for j in range(len(self.metrics))]
        return frame

    def group_min(self) -> pd.DataFrame:
        """Per metric: the smallest group value, its interval, and which group it is."""
        return self._extreme(np.nanmin)

    def group_max(self) -> pd.DataFrame:
        """Per metric: the largest group value, its interval, and which group it is."""
        return self._extreme(np.nanmax)

    def reference_index(self, reference: Any = "largest") -> int | None:
        """Index into ``groups`` of the reference ('largest' = most prompts with acceptance data
        or, failing that, any data; 'overall'; or a group label). None means overall."""
        if reference == BEST_SERVED:
            return self.best_served()
        sizes = self._n_prompts[: len(self.groups)].max(axis=1) if self.metrics else np.zeros(len(self.groups))
        if "acceptance_rate" in self.metrics:
            sizes = self._n_prompts[: len(self.groups), self.metrics.index("acceptance_rate")]
        return _resolve_reference(reference, self.groups, sizes)

    def best_served(self) -> int | None:
        """Index of the group with the highest acceptance (the first of acceptance_rate, mean_beta,
        per_position_acceptance computed): every other group is then compared with the group the
        draft serves best. None (overall) where no group has an acceptance."""
        metric = next((m for m in SERVED_BY if m in self.metrics), None)
        if metric is None or not self.groups:
            return None
        values = np.array([self.value(metric, group) for group in self.groups], dtype=float)
        return int(np.nanargmax(values)) if np.isfinite(values).any() else None

    def _row_index(self, rows: list[tuple[str, int]]) -> pd.MultiIndex:
        """(metric, *group levels) index for rows given as (metric, group position)."""
        tuples = [(m, *(self.groups[i] if len(self.sensitive) > 1 else (self.groups[i],))) for m, i in rows]
        return pd.MultiIndex.from_tuples(tuples, names=["metric", *self.sensitive])

    def value(self, metric: str, group: Any = None, stat: str = "value") -> float:
        """One number: ``stat`` (value, ci_low, ci_high, n_prompts, n_tokens) of ``metric`` for a
        group label (a tuple for intersections), or overall when group is None."""
        if metric not in self.metrics:
            raise InputError(f"GroupFrame: metric {metric!r} was not computed; computed: {', '.join(self.metrics)}.")
        j = self.metrics.index(metric)
        i = len(self.groups) if group is None else self._position(group)
        arrays = {
            "value": self._interval.statistic,
            "ci_low": self._interval.ci_low,
            "ci_high": self._interval.ci_high,
            "n_prompts": self._n_prompts,
            "n_tokens": self._n_tokens,
        }
        if stat not in arrays:
            raise InputError(f"GroupFrame.value: stat must be one of {', '.join(arrays)}, got {stat!r}.")
        return float(arrays[stat][i, j])

    @property
    def prompt_groups(self) -> np.ndarray:
        """The group of every prompt of ``per_prompt``, in its order (a tuple for intersections)."""
        labels = np.empty(len(self._codes), dtype=object)  # filled one by one: tuples must stay whole
        for position, code in enumerate(self._codes):
            labels[position] = self.groups[code] if code >= 0 else None
        return labels

    def _position(self, group: Any) -> int:
        for i, candidate in enumerate(self.groups):
            if group == candidate or str(group) == group_label(candidate):
                return i
        raise InputError(f"GroupFrame: no group {group!r}; groups: {', '.join(group_label(g) for g in self.groups)}.")

    def _reference_intervals(self, reference: Any) -> tuple[int | None, int, BootstrapResult, BootstrapResult]:
        g = len(self.groups)
        ref = self.reference_index(reference)
        col = g if ref is None else ref
        with np.errstate(all="ignore"):
            diff = self._replicates.map(lambda v: v[:, :g] - v[:, col : col + 1]).interval(self.confidence_level, self.method)
            rat = self._replicates.map(lambda v: v[:, :g] / v[:, col : col + 1]).interval(self.confidence_level, self.method)
        return ref, col, diff, rat

    def to_reference(self, reference: Any = "largest") -> pd.DataFrame:
        """Per (metric, group): value, reference value, difference and ratio to the reference group
        (or to overall), each difference/ratio with its bootstrap interval."""
        ref, col, diff, rat = self._reference_intervals(reference)
        rows, keys = [], []
        for j, metric in enumerate(self.metrics):
            for i in range(len(self.groups)):
                keys.append((metric, i))
                rows.append(
                    {
                        "value": self._interval.statistic[i, j],
                        "reference_value": self._interval.statistic[col, j],
                        "difference": diff.statistic[i, j],
                        "difference_ci_low": diff.ci_low[i, j],
                        "difference_ci_high": diff.ci_high[i, j],
                        "ratio": rat.statistic[i, j],
                        "ratio_ci_low": rat.ci_low[i, j],
                        "ratio_ci_high": rat.ci_high[i, j],
                        "n_prompts": int(self._n_prompts[i, j]),
                    }
                )
        frame = pd.DataFrame(rows, index=self._row_index(keys))
        frame.attrs["reference"] = "overall" if ref is None else self.groups[ref]
        return frame

    # ---- tests and flags ----------------------------------------------------------------------

    def _values(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        if metric not in METRICS:
            raise InputError(f"GroupFrame: unknown metric {metric!r}; choose from {', '.join(METRICS)}.")
        values = self.per_prompt[METRICS[metric].value_column].to_numpy(dtype=float)
        pairs = self.per_prompt["pair_id"].to_numpy(dtype=object)
        return values, pairs

    def kruskal(self, metric: str = "acceptance_rate") -> KruskalResult:
        """Kruskal–Wallis across all groups on per-prompt values of ``metric``."""
        values, _ = self._values(metric)
        return kruskal_test([values[self._codes == g] for g in range(len(self.groups))])

    def _pairwise(self, metric: str, ref: int | None, paired: bool) -> list[tuple[int, PairwiseResult, float]]:
        """(group position, result, Holm-adjusted p) for every group but the reference."""
        values, pairs = self._values(metric)
        results = []
        for i in range(len(self.groups)):
            if i == ref:
                continue
            in_group = self._codes == i
            in_ref = (self._codes == ref) if ref is not None else ~in_group
            use_pairs = paired and ref is not None
            results.append(
                (
                    i,
                    pairwise_test(
                        values[in_group],
                        values[in_ref],
                        group_pairs=pairs[in_group] if use_pairs else None,
                        reference_pairs=pairs[in_ref] if use_pairs else None,
                    ),
                )
            )
        adjusted = holm([r.pvalue for _, r in results])
        return [(i, r, float(p)) for (i, r), p in zip(results, adjusted)]

    def pairwise(self, metric: str = "acceptance_rate", reference: Any = "largest", *, paired: bool = True) -> pd.DataFrame:
        """Each group against the reference group (Mann–Whitney, or Wilcoxon on parallel prompts),
        Holm-adjusted over the groups of this metric. With reference='overall' each group is
        compared with all other prompts (unpaired)."""
        ref = self.reference_index(reference)
        results = self._pairwise(metric, ref, paired)
        frame = pd.DataFrame(
            [{**r.__dict__, "pvalue_holm": p} for _, r, p in results],
            columns=[*PairwiseResult.__dataclass_fields__, "pvalue_holm"],
            index=self._group_index()[[i for i, _, _ in results]],
        )
        frame.attrs["reference"] = "overall" if ref is None else self.groups[ref]
        return frame

    def _flag_rows(
        self, metrics: list[str], reference: Any, tolerance: tuple[float, float], alpha: float, power: float, min_prompts: int
    ) -> tuple[list[dict], int | None]:
        low, high = tolerance
        if not 0 < low <= 1 <= high:
            raise InputError(f"disparity: the tolerance band must satisfy 0 < low ≤ 1 ≤ high, got {tolerance!r}.")
        if not 0 < alpha < 1:
            raise InputError(f"disparity: alpha must lie strictly between 0 and 1, got {alpha!r}.")
        ref, col, diff, _ = self._reference_intervals(reference)
        confidence = 1.0 - alpha
        rows = []
        for metric in [m for m in metrics if m in self.metrics]:
            j = self.metrics.index(metric)
            values, pairs = self._values(metric)
            for i, test, p_holm in self._pairwise(metric, ref, paired=True):
                in_group = self._codes == i
                in_ref = (self._codes == ref) if ref is not None else ~in_group
                use_pairs = ref is not None
                interval = ratio_interval(
                    values[in_group],
                    values[in_ref],
                    x_pairs=pairs[in_group] if use_pairs else None,
                    y_pairs=pairs[in_ref] if use_pairs else None,
                    band=(low, high),
                    confidence=confidence,
                    power=power,
                )
                ref_value = self._interval.statistic[col, j]
                rows.append(
                    {
                        "metric": metric,
                        "position": i,
                        "value": self._interval.statistic[i, j],
                        "reference_value": ref_value,
                        "ratio": interval.ratio,
                        "ratio_ci_low": interval.ci_low,
                        "ratio_ci_high": interval.ci_high,
                        "interval_method": interval.method,
                        "confidence_level": confidence,
                        "df": interval.df,
                        "difference": diff.statistic[i, j],
                        "difference_ci_low": diff.ci_low[i, j],
                        "difference_ci_high": diff.ci_high[i, j],
                        "test": test.test,
                        "statistic": test.statistic,
                        "pvalue": test.pvalue,
                        "pvalue_holm": p_holm,
                        "effect_size": test.effect_size,
                        "effect_size_name": test.effect_size_name,
                        "n_prompts": interval.n_group,
                        "n_reference_prompts": interval.n_reference,
                        "n_pairs": interval.n_pairs,
                        "min_detectable_ratio_low": interval.min_detectable_ratio_low,
                        "min_detectable_ratio_high": interval.min_detectable_ratio_high,
                        "small_group": interval.n_group < min_prompts,
                        "outside_band": bool(np.isfinite(interval.ratio) and (interval.ratio < low or interval.ratio > high)),
                        "significant": bool(np.isfinite(p_holm) and p_holm < alpha),
                        "status": interval.status.value,
                        "status_reason": interval.reason,
                    }
                )
        return rows, ref

    def flags(
        self,
        metrics: Sequence[str] | None = None,
        reference: Any = "largest",
        *,
        tolerance: tuple[float, float] = DEFAULT_BAND,
        alpha: float = 0.05,
        power: float = 0.8,
        min_prompts: int = MIN_CHECKED_PROMPTS,
    ) -> pd.DataFrame:
        """Per (metric, group): the ratio to the reference with its interval, status and power, all
        from one method (``specaudit.stats.disparity.intervals``: paired Fieller on parallel
        prompts, unpaired Welch–Fieller otherwise), at
        confidence 1 − α per comparison:

        - ``FLAG``: interval wholly outside the tolerance band;
        - ``WITHIN``: wholly inside (parity shown);
        - ``INCONCLUSIVE``: straddles one band edge;
        - ``INSUFFICIENT``: no interval, or one covering the whole band (``status_reason`` says which).

        ``min_detectable_ratio_low``/``_high`` are the true ratios that this interval FLAGs with
        probability ``power``. The rank test (Mann–Whitney, or Wilcoxon on pairs; Holm over the
        groups of the metric) and its effect size are supporting diagnostics only.
        """
        rows, ref = self._flag_rows(list(metrics or ["acceptance_rate", "speedup"]), reference, tolerance, alpha, power, min_prompts)
        index = self._row_index([(r["metric"], r["position"]) for r in rows])
        frame = pd.DataFrame([{k: v for k, v in r.items() if k not in ("metric", "position")} for r in rows], index=index)
        frame.attrs["reference"] = "overall" if ref is None else self.groups[ref]
        frame.attrs["tolerance"] = tolerance
        return frame

    def warnings(self, min_prompts: int = MIN_CHECKED_PROMPTS) -> list[str]:
        """Plain-language warnings: groups with fewer than ``min_prompts`` prompts (smaller than the
        smallest group at which the ratio interval was checked), groups without data for a metric,
        prompts without a group."""
        messages = []
        acceptance = self.metrics.index("acceptance_rate") if "acceptance_rate" in self.metrics else 0
        dimension = INTERSECTION.join(self.sensitive)
        for i, group in enumerate(self.groups):
            n = int(self._n_prompts[i, acceptance])
            if n < min_prompts:
                messages.append(
                    f"{dimension}={group_label(group)} has {n} prompts (< {min_prompts}): its ratio interval's coverage "
                    "is unchecked at that size; add prompts or merge groups."
                )
            empty = [m for j, m in enumerate(self.metrics) if self._n_prompts[i, j] == 0]
            if empty:
                messages.append(f"{dimension}={group_label(group)} has no data for {', '.join(empty)}.")
        unassigned = int((self._codes < 0).sum())
        if unassigned:
            subject = "1 prompt has" if unassigned == 1 else f"{unassigned} prompts have"
            messages.append(
                f"{subject} no {dimension} attribute; it counts only in 'overall'."
                if unassigned == 1
                else f"{subject} no {dimension} attribute; they count only in 'overall'."
            )
        return messages
