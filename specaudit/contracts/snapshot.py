"""The snapshot contract: what snapshot.json holds, checked once on read by every consumer.

`specaudit analyze` writes snapshot.json; `gate`, `report` and `monitor` read it, each through
`load_snapshot`. A file that is not a snapshot of this schema version is refused with one
sentence (InputError, exit 2) instead of being judged: a gate must never go green on garbage.

The typed view (`Snapshot`) pins the sections consumers read and the types they rely on; inside
them, keys it does not name are kept as they are, so a newer analysis may add fields freely.
Analysis builds these models and writes their dump (`Snapshot.model_dump(exclude_unset=True)`):
keys it did not set are not written, and keys keep the order they were given in.
Statuses are the contracts' enums (specaudit.contracts.status), spelt one way on disk; a snapshot
written before (lower-case "pass", an equivalence status "error") is read through their `parse`,
and `load_snapshot` hands every consumer the one spelling.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, model_serializer, model_validator

from specaudit._files import json_text
from specaudit.contracts.engines import REQUEST_FEATURES
from specaudit.contracts.status import CheckStatus, DisparityStatus, EquivalenceStatus
from specaudit.errors import InputError

SNAPSHOT_SCHEMA_VERSION = 1
SNAPSHOT_FILE = "snapshot.json"

_REGENERATE = "regenerate it with `specaudit analyze RUN_DIR`"


class _Section(BaseModel):
    # strict: a JSON string is not a number, true is not 1; extra: keys this view does not name pass through
    model_config = ConfigDict(strict=True, extra="allow")
    # The order keys were given in, written back in that order (pydantic would put the named
    # fields first): snapshot.json reads as analysis composed it, and a section read from a file
    # and dumped is the file's. A key added by model_copy(update=...) comes after, as in a dict.
    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler: Callable[[Any], _Section]) -> _Section:
        section = handler(data)
        if isinstance(data, Mapping):
            section._order = tuple(data)
        return section

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copy = super().model_copy(update=update, deep=deep)
        copy._order = (*self._order, *(key for key in update or {} if key not in self._order))
        return copy

    def written(self, field: str, default: Any = None) -> Any:
        """A field as the file wrote it (null included), `default` where the file has none."""
        return getattr(self, field) if field in self.model_fields_set else default

    @model_serializer(mode="wrap")
    def _in_order(self, handler: Callable[[Any], Any]) -> Any:
        dumped = handler(self)
        if not isinstance(dumped, dict):
            return dumped
        first = {key: dumped[key] for key in self._order if key in dumped}
        return {**first, **{key: value for key, value in dumped.items() if key not in first}}


class MetricEstimate(_Section):
    """One metric of one group: the estimate and its confidence interval (null where undefined)."""

    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    n_prompts: int | None = None  # a group's metric: the prompts and tokens it was measured on
    n_tokens: int | None = None


class GroupEntry(_Section):
    n_prompts: int | None = None
    metrics: dict[str, MetricEstimate]


class DimensionGroups(_Section):
    """`groups.<dimension>`: the all-prompts block and one block per group."""

    reference: str | None = None
    reference_reason: str | None = None  # how the reference was chosen (absent in older snapshots)
    overall: GroupEntry | None = None
    by_group: dict[str, GroupEntry] = {}


class AnalysisBlock(_Section):
    """`run.analysis`: the settings analysis ran with (specaudit.config.AnalysisSettings) and its wall time."""

    alpha: float | None = None
    delta: float | None = None
    n_boot: int | None = None
    seed: int | None = None
    tolerance: list[float] | None = None
    fallback_threshold: float | None = None
    deployment_cost_ratio: float | None = None
    deployment_verify_cost: float | None = None
    seconds: float | None = None


class DimensionInfo(_Section):
    """`run.prompt_set.dimensions.<name>`: a dimension as the run recorded it (prompts.dimension_entry)."""

    groups: list[str] = []
    reference: str | None = None
    parallel: bool | None = None
    pairing: str | None = None  # "reference" where it is not the default
    labels: dict[str, str] = {}  # readable names of the set's group codes (only those it names)


class PromptSetInfo(_Section):
    """`run.prompt_set`: the prompt set's name, version, checksum, where it came from, its size, and
    its dimensions as its manifest declares them."""

    name: str | None = None
    version: int | str | None = None
    checksum: str | None = None
    source: str | None = None
    n_prompts: int | None = None
    dimensions: dict[str, DimensionInfo] | None = None


class RunConfigBlock(_Section):
    """`run.config`: the run's settings as the runner recorded them (specaudit.config.RunConfig.to_dict()).

    Every field may be absent (a run recorded before it existed, a hand-made snapshot): absent reads
    None, never RunConfig's default, so the report says "not recorded" instead of guessing. The
    engines' settings sections (`extra`, and the top-level `tree`, `levels`, `endpoint` ... of older
    runs) are each engine's own, read through contracts.engines.engine_settings on `as_written()`."""

    target: str | None = None
    draft: str | None = None
    engines: list[str] | None = None
    k: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    # the request features (contracts.engines.REQUEST_FEATURES); absent in runs before them
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repeat_last_n: int | None = None
    logit_bias: dict[str, float] | None = None
    stop: list[str] | None = None
    grammar: str | None = None
    samples: int | None = None
    max_new_tokens: int | None = None
    prompts: str | None = None
    per_group: int | None = None
    seed: int | None = None
    threads: int | None = None
    timing_repeats: int | None = None
    warmup: int | None = None
    extra: dict[str, Any] | None = None  # open by design: each engine's settings section, the screen's own keys

    def as_written(self) -> dict[str, Any]:
        """The config as the manifest holds it (its keys, in their order): what the readers of a
        stored config share with the runner (decoding._shapes, contracts.engines.engine_settings)
        and what the monitor fingerprints."""
        return self.model_dump(exclude_unset=True)

    def request_features(self) -> dict[str, Any]:
        """The request features the run set (contracts.engines.REQUEST_FEATURES; unset or empty left out)."""
        features = self.model_dump(include=set(REQUEST_FEATURES))
        return {name: features[name] for name in REQUEST_FEATURES if features[name] not in (None, {}, [])}


class ModelInfo(_Section):
    """`run.models.<role>`: one model as its engine described it (a local model: name, class, size,
    weight hashes; a GGUF: its path and hash; a derived draft: how and from what; a served model: its
    URL and the name the server answers to). An engine may add keys of its own; they pass through."""

    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True, validate_by_alias=True)

    name: str | None = None
    class_: str | None = Field(None, alias="class")
    parameters: int | None = None
    revision: str | None = None
    sha256: dict[str, str] | None = None  # weight file -> content hash
    gguf: str | None = None
    gguf_sha256: str | None = None
    derived: str | None = None  # int8, early-exit:N, ngram, target: made in process from the target
    from_: str | None = Field(None, alias="from")
    url: str | None = None
    model: str | None = None


class ModelsBlock(_Section):
    """`run.models`: the models the executor loaded or called, by role, and how (device, dtype)."""

    target: ModelInfo | None = None
    draft: ModelInfo | None = None
    tokenizer: ModelInfo | None = None
    vanilla: ModelInfo | None = None  # the endpoint backend: the server with speculation off
    speculative: ModelInfo | None = None  # ... and the one with it on
    device: str | None = None
    dtype: str | None = None
    vocab_size: int | None = None


class DeviceInfo(_Section):
    """`run.device`: where the run decoded (engines.decode.device_entry, or an engine's own facts); a speed verdict is this machine's."""

    type: str | None = None
    name: str | None = None
    cpu_model: str | None = None
    cores: int | None = None
    threads: int | None = None
    load: str | None = None  # what else the servers answered while the plan ran (endpoint: mixed traffic)


class VersionsBlock(_Section):
    """`run.versions`: specaudit's version and commit; the library versions beside them are open by design."""

    specaudit: str | None = None
    specaudit_commit: str | None = None


class SeedsBlock(_Section):
    """`run.seeds`: the run's decoding seed and how each item's seed derives from it."""

    run: int | None = None
    derivation: str | None = None


class StageSeconds(_Section):
    """`run.stage_seconds`: decoding seconds by stage, from the records; a predicted rerun scales them."""

    screen: float | None = None  # each screen record's share of its batch, summed
    engines: float | None = None  # the engines' wall time, timing repeats included


class RunSection(_Section):
    """`run`: what was run (the manifest's identity) and what analysis made of it."""

    id: str | None = None
    dir: str | None = None
    created: str | None = None
    command: str | None = None
    engines: list[str] = []
    dimensions: list[str] = []
    config: RunConfigBlock | None = None
    analysis: AnalysisBlock | None = None
    models: ModelsBlock | None = None
    versions: VersionsBlock | None = None
    device: DeviceInfo | None = None
    prompt_set: PromptSetInfo | None = None
    seeds: SeedsBlock | None = None
    n_records: int | None = None
    n_prompts: int | None = None
    n_output_tokens: int | None = None
    disparity_engine: str | None = None  # the engine whose records the group comparisons measure
    stage_seconds: StageSeconds | None = None


SKIPPED = "skipped"  # a test with no data to test: not a check outcome, so no CheckStatus


def parse_verdict(value: Any) -> CheckStatus | Literal["skipped", EquivalenceStatus.NOT_RUN]:
    """A test's or an engine's verdict: a CheckStatus in any case, "skipped" (no data), or NOT_RUN
    (a test that could not reject, e.g. two-sample tests with one sample per prompt)."""
    text = str(value).strip().lower()
    if text == SKIPPED:
        return SKIPPED
    return EquivalenceStatus.NOT_RUN if text == EquivalenceStatus.NOT_RUN else CheckStatus.parse(value)


def parse_battery_status(value: Any) -> CheckStatus | Literal[EquivalenceStatus.NOT_RUN]:
    """The equivalence section's status: PASS or FAIL when the battery ran, NOT_RUN when nothing was
    audited. Snapshots before the contracts wrote "error" for a failed control: that is FAIL."""
    text = str(value).strip().lower()
    if text == "error":
        return CheckStatus.FAIL
    if text == EquivalenceStatus.NOT_RUN.value:
        return EquivalenceStatus.NOT_RUN
    return CheckStatus.parse(value)


def spelt(value: Any, parse: Callable[[Any], str] = parse_battery_status) -> str:
    """A status kept as text (a monitor history row, a summary), spelt as the contracts spell it;
    a word no status type knows ("unknown", "skipped") stays as it is."""
    try:
        return str(parse(value))
    except ValueError:
        return str(value)


def control_failed(section: Mapping[str, Any]) -> bool:
    """Whether an equivalence section says its control failed (the audit is void): its flag, or
    the status "error" that snapshots before the contracts wrote for it."""
    return bool(section.get("control_failed")) or str(section.get("status")).strip().lower() == "error"


def _parsed(parse: Callable[[Any], Any]) -> BeforeValidator:
    return BeforeValidator(lambda value: value if value is None else parse(value))


Verdict = Annotated[CheckStatus | Literal["skipped", EquivalenceStatus.NOT_RUN], _parsed(parse_verdict)]
Check = Annotated[CheckStatus, _parsed(CheckStatus.parse)]
BatteryStatus = Annotated[CheckStatus | Literal[EquivalenceStatus.NOT_RUN], _parsed(parse_battery_status)]


class ResultVerdict(_Section):
    """A test's result in the snapshot (goodness of fit, two-sample, greedy): its verdict, if any,
    and the family's smallest Holm-adjusted p-value where tests ran."""

    engine: str | None = None
    alpha: float | None = None
    verdict: Verdict | None = None
    pvalue: float | None = None


class BatteryTest(_Section):
    """One test of a battery (stats.equivalence): its statistic, p-value, sample size and method,
    the reason it could not reject where it could not; the PIT's Kolmogorov–Smirnov test and
    histogram beside it."""

    name: str | None = None
    statistic: float | None = None
    pvalue: float | None = None
    n: int | None = None
    method: str | None = None
    verdict: str | None = None
    not_run_reason: str | None = None
    ks: BatteryTest | None = None
    histogram: list[int | float] = []


class PitBound(_Section):
    """stats.equivalence.pit_bound: no distortion of the PIT above `upper`, shown at `level` over
    `n` tokens (the observed Kolmogorov distance plus the DKW margin)."""

    upper: float | None = None
    observed: float | None = None
    margin: float | None = None
    n: int | None = None
    level: float | None = None
    method: str | None = None


class HolmRow(_Section):
    """A row of a battery's Holm table (`gate`): one test and its Holm-adjusted p-value."""

    test: str | None = None
    holm_pvalue: float | None = None
    reject: bool | None = None  # Holm-adjusted p below alpha


class TokenSite(_Section):
    """A token at a place in a record: `key` the record, `position` in its output, `token` the id."""

    key: str | None = None
    position: int | None = None
    token: int | None = None


class ImpossibleTokens(_Section):
    """Tokens emitted with probability 0 under the warped target: `statistic` of `n` scored, the first
    `offenders`; `near_boundary` those within the scorer's numerical tolerance of a truncation, not counted."""

    statistic: int | float | None = None
    n: int | None = None
    verdict: Verdict | None = None
    offenders: list[TokenSite] = []
    near_boundary: list[TokenSite] = []


class GoodnessOfFit(ResultVerdict):
    """An engine's tokens against the target (stats.equivalence): the Holm table and impossible tokens."""

    n_tokens: int | None = None
    gate: list[HolmRow] = []
    tests: dict[str, BatteryTest] = {}
    impossible_tokens: ImpossibleTokens | None = None
    flagged_groups: list[dict[str, Any]] = []


class TwoSample(ResultVerdict):
    """An engine's outputs against the control's: the Holm table, or why the tests could not run."""

    reference: str | None = None
    n_prompts: int | None = None
    gate: list[HolmRow] = []
    tests: dict[str, BatteryTest] = {}
    not_run_reason: str | None = None
    flagged_prompts: list[dict[str, Any]] = []
    flagged_groups: list[dict[str, Any]] = []


class Divergence(_Section):
    """Where a greedy output first differs from the control's, and why (near-tie or not)."""

    prompt_id: str | None = None
    position: int | None = None
    # the engine's token id and the control's there (null past an output's end; a float where the
    # results table widened the column for that null)
    token: int | float | None = None
    reference_token: int | float | None = None
    logit_gap: float | None = None
    top2_gap: float | None = None
    tolerance: float | None = None
    classification: str | None = None


class GreedyComparison(ResultVerdict):
    """Greedy outputs compared with the control's token for token."""

    n_pairs: int | None = None
    n_matches: int | None = None
    match_rate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    divergences: list[Divergence] = []


class SamplePlan(_Section):
    """stats.plugin_tv: the samples per prompt at which a correct engine's TV bound is expected to
    reach `delta` with `power` (`samples` null where no number up to 2**20 does), the expected
    bound there (the plug-in `bias` plus the `margin`), and fewer-prompt budgets (prompts -> samples)."""

    delta: float | None = None
    alpha: float | None = None
    power: float | None = None
    n_prompts: int | None = None
    samples: int | None = None
    expected_upper: float | None = None
    bias: float | None = None
    margin: float | None = None
    fewer_prompts: dict[str, int | float | None] = {}


class TvBound(_Section):
    """stats.equivalence.tv_bound: the first position's TV distance, its upper bound and its verdict
    (`equivalent within delta`, `not shown`, `different`)."""

    upper: float | None = None
    estimate: float | None = None
    kl_upper: float | None = None
    pvalue: float | None = None
    delta: float | None = None
    n_samples: int | None = None
    n_prompts: int | None = None
    position: int = 0  # the output position bounded (the first)
    reference: str = "target"  # what the engine's distribution is compared with
    verdict: str | None = None
    samples_to_show: SamplePlan | None = None


class Violation(_Section):
    """One proven bug a record lists: the record's key, where (the verify call or output position), what."""

    record: str | None = None
    call: int | None = None
    position: int | None = None
    problem: str | None = None


class Violations(_Section):
    """Proven bugs the records list (a verify call that broke its contract, a server's impossible output)."""

    count: int | None = None
    records: int | None = None
    first: Violation | None = None
    examples: list[Violation] = []


class EngineEquivalence(_Section):
    """One engine's entry: its verdict (a CheckStatus; WARN only for a control rejected at alpha
    alone) and its EquivalenceStatus, which agree (a WARN control is NO_VIOLATION_FOUND)."""

    verdict: Verdict | None = None
    status: Annotated[EquivalenceStatus, _parsed(EquivalenceStatus.parse)] | None = None
    status_reason: str | None = None
    goodness_of_fit: GoodnessOfFit | None = None
    two_sample: TwoSample | None = None
    greedy: GreedyComparison | None = None
    tv_bound: TvBound | None = None
    pit_bound: PitBound | None = None
    power: dict[str, float | None] | None = None  # detectable effect -> its size (stats.power)
    # {count, records, first, examples}; `message` words the finding
    verify_violations: Violations | None = None
    server_violations: Violations | None = None
    message: str | None = None


class EquivalenceSection(_Section):
    """`equivalence`: the battery's overall status and one entry per engine (verdict and tests)."""

    status: BatteryStatus
    control_failed: bool = False  # the control failed its own test: status is FAIL and the audit is void
    engines: dict[str, EngineEquivalence] = {}
    control: str | None = None  # the engine judged as the control (plain decoding)
    mode: str | None = None  # "sampling" or "greedy"
    alpha: float | None = None
    delta: float | None = None
    family_rule: str | None = None
    control_alpha: float | None = None  # the level the control is judged at (analysis.equivalence)
    control_warning: str | None = None  # the control was rejected at alpha alone
    scoring: dict[str, Any] | None = None  # where scores came from, when not a local model (server logprobs)
    draft_scoring: dict[str, Any] | None = None  # whether the draft could be scored by teacher forcing
    message: str | None = None
    logprobs_note: str | None = None  # the server's logprobs failed parity: scored locally instead
    failed_concurrency_levels: list[int] | None = None
    failed_cache_states: list[str] | None = None  # --prefix-cache: the states whose battery failed (PrefixCacheSection)

    @model_validator(mode="before")
    @classmethod
    def _old_control_failure(cls, data: Any) -> Any:
        # snapshots before the contracts wrote the status "error" for a failed control, without the flag
        if isinstance(data, Mapping) and control_failed(data) and not data.get("control_failed"):
            return {**data, "control_failed": True}
        return data


class RatioEstimate(_Section):
    """A ratio with its bootstrap interval over `n_prompts` prompts (null where undefined)."""

    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n_prompts: int | None = None


class EngineTimings(_Section):
    """One engine's time to first token, time per output token and throughput at one level, with intervals."""

    ttft_s: RatioEstimate | None = None
    per_token_s: RatioEstimate | None = None
    tokens_per_s: RatioEstimate | None = None


class LevelMetrics(_Section):
    """One group at one concurrency level (or cache state): acceptance, each engine's timings and
    the paired speed-up (analysis.concurrency.group_metrics)."""

    n_records: int | None = None
    acceptance: RatioEstimate | None = None
    vanilla: EngineTimings | None = None
    speculative: EngineTimings | None = None
    speedup: RatioEstimate | None = None


class ConcurrencySection(_Section):
    """`concurrency` (analysis.concurrency), for a run at several concurrency levels: the battery
    and the independence test per level, metrics per group x level, the crossover per group."""

    levels: list[int]
    # analysis.concurrency.split_alpha: alpha split over the pooled battery, the levels' batteries
    # and the independence tests (each level's, split again over its engines)
    pooled_alpha: float | None = None  # None in snapshots written before the split
    level_alpha: float
    independence_alpha: float | None = None
    equivalence: dict[str, EquivalenceSection] = {}  # level -> the battery's status and verdicts there
    independence: dict[str, dict[str, dict[str, Any]]] = {}  # level -> engine -> the permutation test
    groups: dict[str, dict[str, dict[str, LevelMetrics]]] = {}  # dimension -> group -> level -> metrics
    crossover: dict[str, dict[str, int | None]] = {}  # dimension -> group -> the level where speculation stops paying
    failed_levels: list[int] = []
    control_failed_levels: list[int] = []
    dependent_levels: list[int] = []
    message: str | None = None


class PrefixCacheSection(_Section):
    """`prefix_cache` (analysis.prefix_cache), for a run with `--prefix-cache`: the battery per
    cache state, what the server reported reusing per state, and the records not judged in their
    state (a warm request that reused nothing, a cold one that reused tokens)."""

    states: list[str]  # the states the run asked for (contracts.run.PREFIX_CACHE_STATES), in order
    state_alpha: float  # each state's battery is judged at this level (analysis.concurrency.split_alpha)
    equivalence: dict[str, EquivalenceSection] = {}  # state -> the battery's status and verdicts on that state's judged records
    # state -> engine -> {records, judged, tokens, reused_tokens, hits, misses, unreported}
    counts: dict[str, dict[str, dict[str, int]]] = {}
    metrics: dict[str, LevelMetrics] = {}  # state -> acceptance, latency and paired speed-up
    warm_misses: int = 0  # warm records whose server reported reusing no prompt token: not warm, left out of the warm battery
    cold_hits: int = 0  # cold records whose server reported reusing prompt tokens: not cold, left out of the cold battery
    unverified: int = 0  # warm records whose server reports no cached-token count: judged as warm, not shown to be
    failed_states: list[str] = []
    control_failed_states: list[str] = []
    message: str | None = None


class BatchNoise(_Section):
    """How far the spec-OFF server's own logprobs move between batch sizes: the largest difference, over `positions`."""

    max_abs_diff: float | None = None
    positions: int | None = None


class LogprobParitySection(_Section):
    """`logprob_parity` (analysis.logprob_parity): a server's logprobs against its spec-OFF twin's."""

    status: BatteryStatus
    positions: int
    differing: int
    zero_logprob: int = 0
    max_abs_diff: float | None = None
    threshold: float | None = None
    batch_noise: BatchNoise | None = None
    by_concurrency: dict[str, dict[str, int]] = {}
    examples: list[dict[str, Any]] = []
    note: str | None = None
    message: str | None = None


class StabilityLevel(_Section):
    """One concurrency level's acceptance: accepted drafts per output token, the share of requests
    that drafted, and the ratio to the lowest level (null at the lowest)."""

    accepted_per_token: float | None = None
    drafted_share: float | None = None
    ratio_to_lowest: RatioEstimate | None = None


class StabilityFinding(_Section):
    """A collapse under load or a stop during the run: its `kind`, the `level`, the sentence; a stop
    also says from which `request` of how many (`of`) none drafted (`stopped`), and its p-value."""

    kind: str
    message: str
    level: int | None = None
    request: int | None = None
    of: int | None = None
    stopped: int | None = None
    p_value: float | None = None


class AcceptanceStabilitySection(_Section):
    """`acceptance_stability` (analysis.acceptance_stability): collapse under load, speculation stopped during the run."""

    status: Annotated[DisparityStatus, _parsed(DisparityStatus.parse)]
    band_low: float
    levels: dict[str, StabilityLevel] = {}
    findings: list[StabilityFinding] = []
    message: str | None = None


class InvariantViolation(_Section):
    """A record that breaks an output invariant: the engine, the record, the check, where, what."""

    engine: str | None = None
    record: str | None = None
    check: str | None = None
    position: int | None = None
    problem: str | None = None


class OutputInvariantsSection(_Section):
    """`output_invariants` (analysis.invariants): every record of every engine against the output
    invariants (execution.invariants.CHECKS); FAIL on any violation, each named by engine, record
    and position."""

    status: Check
    records: int  # records checked
    checked: list[str] = []  # the checks that ran
    engines: dict[str, dict[str, int]] = {}  # engine -> records, records_violating, violations
    checks: dict[str, int] = {}  # check -> violations
    skipped: dict[str, str] = {}  # check -> why it could not run
    violations: int = 0
    first: InvariantViolation | None = None
    examples: list[InvariantViolation] = []
    message: str | None = None


class EngineFaultsSection(_Section):
    """`engine_faults` (analysis.engine_faults): engine calls that failed (faults.jsonl), counted per
    engine, with the first message, and whether each speculative engine still drafted after the
    first fault. FAIL when any call failed."""

    status: Check
    count: int  # faults
    items: int = 0  # plan items that faulted at least once
    recovered: int = 0  # of those, recorded by a later attempt (a resumed run)
    engines: dict[str, dict[str, Any]] = {}  # engine -> faults, items, recovered, first_message
    first: dict[str, Any] | None = None  # {key, engine, error, message, at}
    speculation_after: dict[str, dict[str, Any]] = {}  # engine -> records and drafted before / after the first fault
    findings: list[dict[str, Any]] = []
    message: str | None = None


class PositionBand(_Section):
    """Acceptance over one band of output positions, with its interval."""

    band: str | None = None
    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n_prompts: int | None = None
    n_positions: int | None = None


class OutputPositions(_Section):
    """stats.context: acceptance by output-position band, and its trend over the bands."""

    engine: str | None = None
    confidence: float | None = None
    bands: list[PositionBand] = []
    trend: dict[str, Any] | None = None


class LengthOption(_Section):
    """Routing prompts of at least `min_prompt_tokens` to plain decoding: how many, and the speed-up before / after."""

    min_prompt_tokens: int | None = None
    n_routed: int | None = None
    n_paired_prompts: int | None = None
    speedup_before: float | None = None
    speedup_after: float | None = None


class LengthFallback(_Section):
    rule: str | None = None
    options: list[LengthOption] = []
    advised: Any = None


class ContextSection(_Section):
    """`context` (stats.context): acceptance by prompt length and output position; `findings` in words."""

    engine: str
    prompt_bands: dict[str, int] = {}  # prompt-length band -> prompts
    by_output_position: OutputPositions | None = None
    length_fallback: LengthFallback | None = None
    findings: list[str] = []


class Comparison(_Section):
    """One group against its reference on one metric (stats.disparity): the ratio with its interval,
    the rank test's p-values, and the status under the band."""

    ratio: MetricEstimate | None = None
    difference: MetricEstimate | None = None
    pvalue: float | None = None
    pvalue_holm: float | None = None
    test: str | None = None  # "mannwhitneyu", or "wilcoxon" for parallel prompts
    effect_size: float | None = None
    effect_size_name: str | None = None
    n_prompts: int | None = None
    n_reference_prompts: int | None = None
    n_pairs: int | None = None  # parallel prompts: the pairs the signed-rank test used
    small_group: bool | None = None
    interval_method: str | None = None  # absent in snapshots written before the ratio intervals
    # the smallest drop and rise of the ratio detected with 80% power (older snapshots: `mdr`, an extra)
    min_detectable_ratio_low: float | None = None
    min_detectable_ratio_high: float | None = None
    status: Annotated[DisparityStatus, _parsed(DisparityStatus.parse)] | None = None

    @property
    def has_interval_rule(self) -> bool:
        """Whether the analysis judged this row by its ratio interval (snapshots before it did not)."""
        return "interval_method" in self.model_fields_set


class KruskalTest(_Section):
    """The rank test across all of a dimension's groups on one metric."""

    statistic: float | None = None
    pvalue: float | None = None
    n_groups: int | None = None
    n_prompts: int | None = None


class Spread(_Section):
    """How far a metric spreads: between the groups (max − min, or min ÷ max) and to the overall value."""

    between_groups: MetricEstimate | None = None
    to_overall: MetricEstimate | None = None


class MetricDisparity(_Section):
    """One metric across a dimension's groups: the pairwise comparisons and the overall rank test."""

    pairwise: dict[str, Comparison] = {}
    kruskal: KruskalTest | None = None
    difference: Spread = Spread()
    ratio: Spread = Spread()


class AcceptanceCell(_Section):
    """The drill-down's acceptance of one group at one draft position (`position`) or token-rarity
    bucket (`rank_bucket`), with its interval, over `n_positions` drafted positions."""

    group: str | None = None
    position: int | None = None
    rank_bucket: str | None = None
    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n_positions: int | None = None
    n_accepted: int | None = None


class Correction(_Section):
    """A token the target most often put in place of a group's drafted one, with an example."""

    group: str | None = None
    token_id: int | None = None
    token: str | None = None
    n_corrections: int | None = None
    share_of_group_corrections: float | None = None
    correction_rate: float | None = None
    example_prompt_id: str | None = None
    example_position: int | None = None
    example_context: str | None = None


class PromptValue(_Section):
    prompt_id: str | None = None
    value: float | None = None


class BelowThreshold(_Section):
    """The share of a group's prompts whose metric lies below a threshold, with the lowest prompts."""

    group: str | None = None
    metric: str | None = None
    threshold: float | None = None
    n_prompts: int | None = None
    n_below: int | None = None
    share: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    lowest_prompts: list[PromptValue] = []


class Drilldown(_Section):
    """`disparities.<dimension>.drilldown`: where acceptance differs (by draft position and token
    rarity), the target's most frequent corrections, and the prompts below a threshold."""

    rank_source: str | None = None
    skipped_records: int | None = None
    by_position: list[AcceptanceCell] = []
    by_rarity: list[AcceptanceCell] = []
    corrections_note: str | None = None
    corrections: list[Correction] = []
    below_threshold: list[BelowThreshold] = []


class DimensionDisparities(_Section):
    """`disparities.<dimension>`: each metric's comparisons with the reference group, and how they were judged."""

    reference: str | None = None
    tolerance: list[float] | None = None
    alpha: float | None = None
    compared_metrics: list[str] | None = None
    gated_metrics: list[str] | None = None  # an engine's own rule where it has one, not the mean β beside it
    correction: str | None = None
    metrics: dict[str, MetricDisparity] = {}
    flags: list[Any] = []
    warnings: list[Any] = []
    drilldown: Drilldown | None = None


class AdviceRow(_Section):
    """One group's advice (stats.advice): the cost model's draft length and speed-ups at it, the
    best draft length, whether speculation slows the group down, and the deployment projection."""

    k: int | None = None
    alpha: float | None = None
    alpha_source: str | None = None
    alpha_portable: MetricEstimate | None = None
    engine_rule_rate: MetricEstimate | None = None
    cost_ratio: float | None = None
    verify_cost: float | None = None
    expected_speedup: float | None = None
    expected_speedup_from_measured_tau: float | None = None
    measured_speedup: MetricEstimate | None = None
    best_k: int | None = None
    best_k_expected_speedup: float | None = None
    break_even_alpha: float | None = None
    break_even_acceptance_rate: float | None = None
    slowed_down: bool | None = None
    slowed_down_significantly: bool | None = None
    projected_speedup: MetricEstimate | None = None
    projected_from: str | None = None


class FallbackRow(_Section):
    """The fallback routing simulated on one group's (or all) paired prompts: routed, and before / after."""

    threshold: float | None = None
    n_paired_prompts: int | None = None
    n_routed: int | None = None
    share_routed: float | None = None
    latency_per_token_before_s: float | None = None
    latency_per_token_after_s: float | None = None
    speedup_before: float | None = None
    speedup_after: float | None = None
    ratio_to_reference_before: float | None = None
    ratio_to_reference_after: float | None = None


class FallbackSweep(_Section):
    threshold: float | None = None
    overall_speedup: float | None = None
    share_routed: float | None = None
    min_max_speedup_ratio: float | None = None


class Fallback(_Section):
    """Routing prompts below a threshold to plain decoding: the rule, per group and overall, and a sweep of thresholds."""

    threshold: float | None = None
    rule: str | None = None
    threshold_metric: str | None = None
    oracle: bool | None = None
    reference: str | None = None
    by_group: dict[str, FallbackRow] = {}
    overall: FallbackRow | None = None
    min_max_speedup_ratio_before: float | None = None
    min_max_speedup_ratio_after: float | None = None
    sweep: list[FallbackSweep] = []


class Projection(_Section):
    """The speed-up projected for a deployment described with --deployment-cost-ratio."""

    cost_ratio: float | None = None
    verify_cost: float | None = None
    formula: str | None = None
    note: str | None = None


class DimensionAdvice(_Section):
    """`recommendations.<dimension>` (stats.advice): per group the cost model's draft length and
    speed-ups, the fallback routing simulation, and the projection for a deployment described
    with --deployment-cost-ratio."""

    model: str | None = None  # the speed-up model, in words
    acceptance_rule: str | None = None  # what engine_rule_rate measures
    by_group: dict[str, AdviceRow] = {}
    fallback: Fallback | None = None
    projection: Projection | None = None
    messages: list[str] = []


class ShapeFigures(_Section):
    """One engine's step shape over some prompts (stats.shape_acceptance), each figure a ratio of
    sums with its prompt-bootstrap interval: tokens emitted per verification step, the acceptance
    at depth d (`depths[d - 1]`: a step that reached depth d accepted there; a chain's position d),
    each staged level's accepted / proposed, and the speed-up over plain decoding (measured time
    per output token, paired prompts; absent without the control's timings)."""

    n_prompts: int
    steps: int | float  # verification steps (expected steps for the screen's expectation)
    tokens_per_step: MetricEstimate
    depths: list[MetricEstimate] = []
    levels: dict[str, MetricEstimate] = {}  # "small_to_medium", "medium_to_target"
    speedup: MetricEstimate | None = None
    # tokens per step over the step's measured cost, τ / (c·D + v) (ShapeEngine's costs; the interval τ's)
    predicted_speedup: MetricEstimate | None = None


class ShapeEngine(_Section):
    """`shapes.engines.<engine>`: what its steps look like (`shape`, e.g. "tree 2,2,1, sampled
    children"), over all its prompts and per group of each dimension, and what a step costs."""

    shape: str
    overall: ShapeFigures | None = None
    groups: dict[str, dict[str, ShapeFigures]] = {}  # dimension -> group -> figures
    # measured on its timed records, in plain decoding steps (stats.cost_model.step_costs): c the
    # draft's time per offered position, v one verification's time, D positions offered per step
    cost_ratio: float | None = None
    verify_cost: float | None = None
    offered_per_step: float | None = None
    nodes_per_step: float | None = None  # a tree's drafted tokens the target verified per step


class ShapesSection(_Section):
    """`shapes` (analysis.shapes), for a run with the tree or staged engine: per engine (the chain
    beside them where it ran), tokens per step and acceptance per depth and level, per group."""

    method: str
    engines: dict[str, ShapeEngine] = {}


class CheckDetails(_Section):
    """`gate.checks[].details`: what the check measured, each check its own figures (they pass
    through); named here, the two a reader asks of any check."""

    not_run: bool | None = None  # the check could not judge (no data to judge)
    status: str | None = None  # the judged part's own status (an engine's equivalence status, ...)


class GateCheckEntry(_Section):
    name: str | None = None
    title: str | None = None
    status: Check
    message: str | None = None
    details: CheckDetails | None = None


class GateThresholdsBlock(_Section):
    """`gate.thresholds`: what the gate demanded (specaudit.config.GateThresholds.to_dict()); a null
    threshold is taken from the analysis. Absent in snapshots gated before it existed: None."""

    alpha: float | None = None
    tv_delta: float | None = None
    band_low: float | None = None
    band_high: float | None = None
    disparity_metrics: list[str] | None = None
    disparity_severity: str | None = None
    tv_severity: str | None = None
    min_speedup: float | None = None
    slowdown_severity: str | None = None
    min_group_size: int | None = None
    fail_on: str | None = None


class GateSection(_Section):
    """`gate`: the gate's status and its checks, as `specaudit gate` wrote them."""

    status: Check
    exit_code: int | None = None
    counts: dict[Check, int] | None = None
    thresholds: GateThresholdsBlock | None = None
    checks: list[GateCheckEntry] = []


class CostModelFit(_Section):
    """The cost model fitted on the prompts both engines timed: its components' fits, the draft's
    cost ratio, and `n_prompts` timed."""

    vanilla: dict[str, Any] | None = None
    draft: dict[str, Any] | None = None
    verify_and_overhead: dict[str, Any] | None = None
    cost_ratio: float | None = None
    n_prompts: int | None = None


class SpeedValidation(_Section):
    """The cost model's out-of-sample check: measured / predicted speed-up on the timed prompts."""

    measured_over_predicted: MetricEstimate | None = None
    n_prompts: int | None = None
    method: str | None = None
    holds: bool | None = None


class SpeedSection(_Section):
    """`speed`: where the speed-up columns come from when the screen measured acceptance: "cost
    model" (predicted per screened prompt, with the model and its out-of-sample validation) or
    "none" (too few timed prompts; `reason` says why)."""

    source: str
    reason: str | None = None
    cost_model: CostModelFit | None = None
    validation: SpeedValidation | None = None
    # dimension -> group -> n_timed_prompts, measured_over_predicted, others, pvalue, pvalue_holm
    validation_by_group: dict[str, dict[str, dict[str, Any]]] | None = None
    validation_by_group_tested: int | None = None  # groups tested
    validation_by_group_smallest_pvalue_holm: float | None = None
    validation_by_group_method: str | None = None
    finding: str | None = None
    single_prompt_outliers: str | None = None  # groups off their prediction on one timed prompt: re-time, not a finding


class ScreenTest(_Section):
    """One of the screen's agreement tests: the ratio, its interval, its p-value and Holm's."""

    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    pvalue: float | None = None
    pvalue_holm: float | None = None
    rejected: bool | None = None


class ScreenSection(_Section):
    """`screen`: does the screen reproduce the speculative engine on the prompts both ran
    (analysis.screen_agreement)? Two tests, Holm over them: `engine_over_screen_acceptance` on the
    same prompts and `given_engine_paths` (the acceptance model along the engine's own paths), each
    {value, ci_low, ci_high, pvalue, pvalue_holm, rejected}, or `note` where a test could not run."""

    n_prompts: int
    method: str | None = None
    engine_over_screen_acceptance: ScreenTest | None = None
    given_engine_paths: ScreenTest | None = None
    agrees: bool | None = None
    finding: str | None = None
    note: str | None = None


class IdentityCheck(_Section):
    """One engine's identity-draft test (stats.identity): accepted of the judged drafts against
    its rule's expectation, `interval` the acceptance a correct verifier reaches at `alpha`."""

    engine: str
    rule: str
    accepted: int
    tested: int
    acceptance: float | None = None
    expected: float | None = None
    interval: list[float | None] = []
    pvalue: float | None = None
    alpha: float
    tolerance: float
    method: str
    verdict: str  # PASS, FAIL or "skipped" (nothing judged)
    message: str


class IdentitySection(_Section):
    """`identity` (analysis.identity): a run with `--draft target`, its acceptance against the rule's."""

    status: Check
    sampling: str
    tolerance: float
    engines: dict[str, IdentityCheck] = {}
    message: str


class PromptRow(_Section):
    """One row of `prompts`: a prompt's id, pair and groups, then its per-prompt values (acceptance,
    speed-up, ...), which `monitor check` and `report --compare` test pair by pair. Every value
    column is a number or null: a number written as a string would otherwise drop out of those
    tests unseen."""

    id: str
    pair_id: str | None = None
    attributes: dict[str, str | int | float | None] = {}

    @model_validator(mode="after")
    def _numbers(self) -> PromptRow:
        for name, value in (self.model_extra or {}).items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                got = type(value).__name__
                kind = {"str": "a string", "list": "a list", "dict": "an object", "bool": "a boolean"}.get(got, got)
                raise ValueError(f"{name} of prompt {self.id!r} must be a number or null, got {kind}")
        return self


class BeforeAfter(_Section):
    before: float | None = None
    after: float | None = None


class PairedChange(_Section):
    """A metric before and after mitigation on the same prompts, and the paired change."""

    before: MetricEstimate | None = None
    after: MetricEstimate | None = None
    change: MetricEstimate | None = None


class MitigatedGroup(PairedChange):
    """One group's acceptance before / after (`before`, `after`, `change`), its speed-up likewise,
    the relative change and the ratio to the reference group."""

    speedup: PairedChange | None = None
    relative_change: float | None = None
    ratio_to_reference: BeforeAfter | None = None


class MitigationComparison(_Section):
    reference: str | None = None
    cost_ratio: float | None = None
    groups: dict[str, MitigatedGroup] = {}  # group (and "(overall)") -> before / after
    worst_group_before: str | None = None
    worst_ratio: BeforeAfter | None = None


class WeightingOutcome(_Section):
    """What one training weighting gave: overall and lowest-group acceptance after, and the worst ratio."""

    overall_after: MetricEstimate | None = None
    worst_ratio: BeforeAfter | None = None
    lowest_group_after: MetricEstimate | None = None
    lowest_group_change: MetricEstimate | None = None


class HeldOutPrediction(_Section):
    run_k: float | None = None  # the predicted speed-up at the run's k, and under the policy
    policy: float | None = None


class GroupPolicy(_Section):
    """A group's serving policy (mitigate's policies): its draft length, or plain decoding, and why."""

    alpha: float | None = None
    k: int | float | None = None
    route_to_vanilla: bool | None = None
    reason: str | None = None
    measured_speedup_fit: MetricEstimate | None = None
    expected_speedup_run_k: float | None = None
    expected_speedup_best_k: float | None = None
    expected_speedup_policy: float | None = None
    held_out_alpha: float | None = None
    predicted_speedup_held_out: HeldOutPrediction | None = None


class PolicyTiming(_Section):
    """One group's (or "(overall)") timed speed-up on held-out prompts without and with the policy."""

    n_prompts: int | None = None
    speedup_without_policy: MetricEstimate | None = None
    speedup_with_policy: MetricEstimate | None = None
    gain_with_policy: MetricEstimate | None = None
    route_to_vanilla: bool | None = None
    k: int | float | None = None
    slower_than_vanilla_with_policy: bool | None = None


class PolicyReaudit(_Section):
    """The policies' timed re-audit (`status` "run", or why not in `reason`)."""

    status: str | None = None
    reason: str | None = None
    engines: str | None = None
    method: str | None = None
    run_k: int | float | None = None
    max_new_tokens: int | None = None
    groups: dict[str, PolicyTiming] = {}
    routed: list[str] = []
    slower_than_vanilla_with_policy: list[str] = []


class MitigatedEquivalence(_Section):
    """The mitigated draft's equivalence re-audit as mitigate summarised it (`reason` where it did not run)."""

    status: str | None = None
    verdict: str | None = None
    prompts: list[str] = []
    records: int | None = None
    tokens: int | None = None
    goodness_of_fit_p: float | None = None
    tv_bound: float | None = None
    run_dir: str | None = None
    reason: str | None = None


class MitigationCost(_Section):
    """The draft's cost relative to the target's step, as mitigate measured it."""

    cost_ratio: float | None = None
    target_step_s: float | None = None
    draft_step_s: float | None = None
    steps: int | None = None
    rounds: int | None = None


class PolicyFit(_Section):
    """How the policies were fitted: on which engine's records, where the speed-ups came from, the method."""

    engine: str | None = None
    speed_source: str | None = None
    method: str | None = None


class MitigationSection(_Section):
    """`mitigation`: `specaudit mitigate`'s before/after (its before_after.json), on its re-audit."""

    kind: str | None = None
    source_run: str | None = None
    dimension: str | None = None
    lowest_group_by_audit: str | None = None
    measurement: str | None = None
    weighting: str | None = None
    trained: bool | None = None
    not_trained: str | None = None
    train_prompts: int | None = None
    held_out_prompts: int | None = None
    comparison: MitigationComparison | None = None
    weightings: dict[str, WeightingOutcome] = {}
    cost: MitigationCost | None = None
    policy_fit: PolicyFit | None = None
    policies: dict[str, GroupPolicy] = {}
    policy_reaudit: PolicyReaudit | None = None
    run_k: int | float | None = None
    equivalence: MitigatedEquivalence | None = None


class Snapshot(_Section):
    """The typed view of snapshot.json (schema version SNAPSHOT_SCHEMA_VERSION)."""

    schema_version: int
    run: RunSection
    equivalence: EquivalenceSection
    groups: dict[str, DimensionGroups]
    disparities: dict[str, DimensionDisparities] = {}
    recommendations: dict[str, DimensionAdvice] = {}
    prompts: list[PromptRow] = []
    gate: GateSection | None = None
    logprob_parity: LogprobParitySection | None = None  # only where a server returned logprobs
    concurrency: ConcurrencySection | None = None  # only for runs at concurrency levels
    prefix_cache: PrefixCacheSection | None = None  # only for runs with --prefix-cache
    acceptance_stability: AcceptanceStabilitySection | None = None  # runs at levels with the server's acceptance counts
    speed: SpeedSection | None = None  # only for runs with the screen (stats.cost_model)
    screen: ScreenSection | None = None  # only for runs with the screen and the speculative engine
    context: ContextSection | None = None  # where groups are compared
    output_invariants: OutputInvariantsSection | None = None  # every record against the output invariants
    engine_faults: EngineFaultsSection | None = None  # engine calls that failed during the run
    identity: IdentitySection | None = None  # only for runs with --draft target
    shapes: ShapesSection | None = None  # only for runs with the tree or staged engine
    mitigation: MitigationSection | None = None  # `specaudit mitigate`'s before/after, on a re-audit


def snapshot_path(path: str | Path) -> Path:
    """A run folder or a snapshot file → the snapshot file's path."""
    path = Path(path)
    return path / SNAPSHOT_FILE if path.is_dir() else path


def _read(path: str | Path) -> tuple[Any, str]:
    file = snapshot_path(path)
    if not file.is_file():
        hint = " (run `specaudit analyze RUN_DIR` first)" if Path(path).is_dir() else ""
        raise InputError(f"{file} does not exist{hint}")
    try:
        return json.loads(file.read_text(encoding="utf-8")), str(file)
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(f"{file} is not valid JSON ({err}); {_REGENERATE}") from None
    except OSError as err:
        raise InputError(f"cannot read {file}: {err.strerror}") from None


_EXPECTED = {
    "dict_type": "an object",
    "list_type": "a list",
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number or null",
    "bool_type": "true or false",
    "model_type": "an object",
}


def first_problem(err: ValidationError) -> str:
    """One clause naming the first field that breaks the contract, e.g. "groups must be an object, got a list"."""
    problem = err.errors(include_url=False)[0]
    field = ".".join(str(part) for part in problem["loc"]) or "the top level"
    if problem["type"] == "missing":
        return f"has no '{field}' section" if len(problem["loc"]) == 1 else f"has no '{field}'"
    got = type(problem.get("input")).__name__
    got = {"dict": "an object", "list": "a list", "str": "a string", "NoneType": "null", "bool": "a boolean"}.get(got, got)
    want = _EXPECTED.get(problem["type"].removesuffix("_parsing"), None)
    return f"{field} must be {want}, got {got}" if want else f"{field}: {problem['msg'].removeprefix('Value error, ')}"


def validate_snapshot(snapshot: Any, where: str = "snapshot") -> Snapshot:
    """The typed view of a snapshot mapping; InputError (one sentence naming ``where``) if it breaks the contract."""
    if not isinstance(snapshot, Mapping):
        raise InputError(f"{where} is not a specaudit snapshot (a JSON object), it holds {type(snapshot).__name__}; {_REGENERATE}")
    if "schema_version" not in snapshot:
        raise InputError(f"{where} is not a specaudit snapshot (no schema_version field); {_REGENERATE}")
    version = snapshot["schema_version"]
    if version != SNAPSHOT_SCHEMA_VERSION or isinstance(version, bool):
        raise InputError(
            f"{where} has schema_version {version!r} but this specaudit reads version {SNAPSHOT_SCHEMA_VERSION}; "
            "re-run `specaudit analyze` with this version or upgrade specaudit"
        )
    try:
        return Snapshot.model_validate(dict(snapshot))
    except ValidationError as err:
        problem = first_problem(err)
        raise InputError(
            f"{where}{' ' if problem.startswith('has no') else ': '}{problem}; the file is damaged or not a snapshot ({_REGENERATE})"
        ) from None


def _one_spelling(snapshot: dict[str, Any], typed: Snapshot) -> dict[str, Any]:
    """The snapshot with every typed status as its enum member, whatever case the file used; the
    sections changed are copies, so the caller's mapping is left as it was."""
    old, section = snapshot["equivalence"], typed.equivalence
    engines = {}
    for name, raw in (old.get("engines") or {}).items():
        entry, typed_entry = dict(raw), section.engines[name]
        for key in ("verdict", "status"):
            if getattr(typed_entry, key) is not None:
                entry[key] = getattr(typed_entry, key)
        for test in ("goodness_of_fit", "two_sample", "greedy"):
            result = getattr(typed_entry, test)
            if result is not None and result.verdict is not None:
                entry[test] = {**raw[test], "verdict": result.verdict}
        engines[name] = entry
    respelt = {**snapshot, "equivalence": {**old, "status": section.status, "engines": engines}}
    if control_failed(old):
        respelt["equivalence"]["control_failed"] = True
    if typed.gate is not None:
        gate = snapshot["gate"]
        respelt["gate"] = {
            **gate,
            "status": typed.gate.status,
            "checks": [{**raw, "status": check.status} for raw, check in zip(gate.get("checks") or [], typed.gate.checks)],
        }
        if typed.gate.counts is not None:
            respelt["gate"]["counts"] = typed.gate.counts
    return respelt


def read_snapshot(source: Snapshot | str | Path | Mapping[str, Any]) -> Snapshot:
    """The typed snapshot, what report, gate and monitor read: a Snapshot is returned as it is; a
    path, a run folder or a mapping is read and validated (InputError, one sentence, otherwise)."""
    if isinstance(source, Snapshot):
        return source
    if isinstance(source, Mapping):
        return validate_snapshot(source)
    if isinstance(source, (str, Path)):
        snapshot, where = _read(source)
        return validate_snapshot(snapshot, where)
    raise InputError(f"a snapshot is a snapshot.json path, its run folder or a mapping, not {type(source).__name__}")


def plain_data(value: Any) -> Any:
    """`value` with every typed section in it dumped as the file holds it (the keys it was given,
    in their order): what a gate check's details carry."""
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)
    if isinstance(value, Mapping):
        return {key: plain_data(item) for key, item in value.items()}
    return [plain_data(item) for item in value] if isinstance(value, (list, tuple)) else value


def _as_read(value: Any) -> Any:
    """`value` (typed sections among plain values) as a reader gets it back from snapshot.json:
    sections dumped, then through strict JSON (NaN as null)."""
    return json.loads(json_text(plain_data(value)))


def build_snapshot(parts: Mapping[str, Any]) -> Snapshot:
    """The typed snapshot from its sections (typed or plain), validated once, exactly as a reader
    will read it back from the file that `snapshot_document` writes (InputError if it breaks the contract)."""
    return validate_snapshot(_as_read(parts))


def with_gate(snapshot: Snapshot, gate: Mapping[str, Any]) -> Snapshot:
    """The snapshot with `gate` (GateResult.to_dict) as its gate section, as a reader will read it."""
    return snapshot.model_copy(update={"gate": GateSection.model_validate(_as_read(gate))})


def snapshot_document(snapshot: Snapshot) -> dict[str, Any]:
    """What snapshot.json holds for a typed snapshot: the keys it was given, in their order, every
    status spelt as the contracts spell it."""
    return snapshot.model_dump(exclude_unset=True)


def load_snapshot_and_view(source: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], Snapshot]:
    """The snapshot as read (the dict from JSON, its statuses as the contracts' enums) and its typed
    view, validated once, from a snapshot.json path, a run folder holding one, or a mapping: for a
    reader that keeps the file as it was (the monitor's store) and reads the typed view."""
    if isinstance(source, Mapping):
        snapshot, where = dict(source), "snapshot"
    elif isinstance(source, (str, Path)):
        snapshot, where = _read(source)
    else:
        raise InputError(f"a snapshot is a snapshot.json path, its run folder or a mapping, not {type(source).__name__}")
    typed = validate_snapshot(snapshot, where)
    return _one_spelling(snapshot, typed), typed


def load_snapshot(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """The validated snapshot as the dict read from JSON, its statuses as the contracts' enums (see
    load_snapshot_and_view); readers of the typed view call read_snapshot."""
    return load_snapshot_and_view(source)[0]


__all__ = [
    "SNAPSHOT_FILE",
    "SNAPSHOT_SCHEMA_VERSION",
    "AcceptanceStabilitySection",
    "AnalysisBlock",
    "ConcurrencySection",
    "ContextSection",
    "DimensionAdvice",
    "EngineEquivalence",
    "EngineFaultsSection",
    "EquivalenceSection",
    "IdentityCheck",
    "IdentitySection",
    "LogprobParitySection",
    "OutputInvariantsSection",
    "PrefixCacheSection",
    "PromptRow",
    "RunSection",
    "ShapeEngine",
    "ShapeFigures",
    "ShapesSection",
    "Snapshot",
    "control_failed",
    "build_snapshot",
    "first_problem",
    "load_snapshot",
    "load_snapshot_and_view",
    "parse_battery_status",
    "parse_verdict",
    "plain_data",
    "read_snapshot",
    "snapshot_document",
    "snapshot_path",
    "spelt",
    "validate_snapshot",
    "with_gate",
]
