"""`specaudit audit --dry-run`: the audit's plan (prompts, engines, samples, tokens) and its
predicted time, printed without loading a model or decoding; an audit of your servers checks, as
the run would first, that the API key's variable is set and that both servers answer (exit 2 if not).

The prediction uses rates measured on committed runs (docs/results.md), per screened prompt, per
prompt both engines decode and per analysed prompt, scaled by new tokens and samples. They hold
for the pair and the machine they were measured on (a 2-core x86 CPU, one torch thread); for
anything else the plan is printed and the time is said to be unknown rather than guessed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE, SPECULATIVE_ENGINE

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from specaudit.config import RunConfig
    from specaudit.decoding import SamplingSpec


@dataclass(frozen=True)
class MeasuredRates:
    """Seconds per unit at `tokens` new tokens, from the committed runs named in `source`."""

    screen_per_prompt: float
    engines_per_prompt: float  # vanilla and speculative together, one sample each
    analysis_fixed: float
    analysis_per_engine_prompt: float
    tokens: int
    machine: str
    source: str


# The default pair (SmolLM2-135M-Instruct, int8 self-draft), float32 on a 2-core CPU: the default
# audit (440 screened, 44 decoded: screen 180 s, engines 191 s, analysis 65 s) and its --quick
# (132 screened, 8 decoded: 115 s in all) give these; --per-group 30 (1,320 screened) took 760 s
# against 796 s predicted.
DEFAULT_PAIR = MeasuredRates(
    screen_per_prompt=180 / 440,
    engines_per_prompt=191 / 44,
    analysis_fixed=17.0,
    analysis_per_engine_prompt=1.1,
    tokens=32,
    machine="a 2-core x86 CPU, float32, one torch thread",
    source="the default audit and its --quick in docs/results.md",
)


@dataclass(frozen=True)
class PlanOnly:
    """What `audit --dry-run` returns in place of an audit: nothing ran."""

    exit_code: int = 0


def measured_rates(cfg: RunConfig) -> MeasuredRates | None:
    local = set(cfg.engines) <= {SCREEN_ENGINE, CONTROL_ENGINE, SPECULATIVE_ENGINE}
    default_pair = cfg.target == "default" and cfg.draft == "int8" and cfg.dtype in ("auto", "float32") and cfg.device in ("auto", "cpu")
    return DEFAULT_PAIR if local and default_pair and cfg.k == 4 else None


def predicted_seconds(cfg: RunConfig, screened: int, decoded: int, rates: MeasuredRates, *, share_left: float = 1.0) -> float:
    """Seconds to screen `screened` prompts, decode `decoded` with the engines and analyse them;
    `share_left`: the part of the engines' items still to decode (a resumed run's; the analysis
    covers the whole run)."""
    scale = cfg.max_new_tokens / rates.tokens * cfg.samples
    screen = screened * rates.screen_per_prompt * scale if SCREEN_ENGINE in cfg.engines else 0.0
    engines = share_left * decoded * rates.engines_per_prompt * scale * (1 + cfg.timing_repeats / max(cfg.samples, 1))
    return screen + engines + rates.analysis_fixed + decoded * rates.analysis_per_engine_prompt


def concurrency_levels(cfg: RunConfig) -> tuple[int, ...]:
    """The levels the plan runs at, read by the serving engine's own settings (so a bad value is
    refused here too); () for one pass."""
    from specaudit.contracts.engines import ENGINES, resolve

    for name in cfg.engines:
        spec = ENGINES[name]
        if spec.concurrency:
            return resolve(spec.settings).concurrency_levels(cfg.extra.get(spec.section))
    return ()


def plan_line(cfg: RunConfig) -> str:
    """What the plan says of the models: the engine's own line where it has one (an endpoint's servers,
    checked as the run would check them first: an InputError, exit 2, where they do not answer)."""
    from specaudit.contracts.engines import ENGINES, resolve

    for name in cfg.engines:
        module = resolve(ENGINES[name].settings) if ENGINES[name].settings else None
        if module is not None and hasattr(module, "plan_line"):
            return module.plan_line(cfg)
    return f"models: target {cfg.target}, draft {cfg.draft}; engines {','.join(cfg.engines)}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {secs} s" if minutes else f"{secs} s"


def _records_done(out: str | Path) -> set[str]:
    """Keys of the records a run folder already holds (a resumed run decodes only the others)."""
    from pathlib import Path

    from specaudit.contracts.run import RECORDS_FILE
    from specaudit.execution.records import load_records

    path = Path(out) / RECORDS_FILE
    return {record.key for record in load_records(path)} if path.is_file() else set()


def print_plan(cfg: RunConfig, out: str | Path, specs: Sequence[SamplingSpec] | None = None, *, resume: bool = False) -> PlanOnly:
    """Print what the audit would do and how long it is predicted to take; nothing runs. With
    `resume`, the records already in `out` are counted and only what is left is predicted."""
    from specaudit.contracts.engines import ENGINES
    from specaudit.execution.folder import load_run_prompts
    from specaudit.execution.plan import engine_subset, plan_items

    prompt_set = load_run_prompts(cfg)
    prompts = list(prompt_set.prompts)
    screened_run = SCREEN_ENGINE in cfg.engines and len(cfg.engines) > 1
    subset = engine_subset(prompt_set, cfg) if screened_run else None
    record_engines = tuple(dict.fromkeys(name for engine in cfg.engines for name in ENGINES[engine].records))
    items = plan_items(prompts, cfg, record_engines, subset)
    per_engine = Counter(item.engine for item in items)
    decoded = len(subset) if subset is not None else len(prompts)
    groups = {
        dim: len({p.attributes.get(dim) for p in prompts if p.attributes.get(dim) is not None}) for dim in prompt_set.dimensions or {}
    }
    settings = len(specs) if specs else 1
    done = _records_done(out) if resume else set()
    left = [item for item in items if item.key not in done]
    print(f"plan (nothing runs: --dry-run); the audit would {'continue' if resume else 'write'} {out}/")
    print(f"  {plan_line(cfg)}")
    levels = concurrency_levels(cfg)
    print(
        f"  prompts: {len(prompts)} of {cfg.prompts}" + (f" ({', '.join(f'{d} {n} groups' for d, n in groups.items())})" if groups else "")
    )
    if subset is not None:
        print(f"  the screen covers all {len(prompts)}; the engines decode {decoded} of them")
    print(f"  decoding: {cfg.samples} sample(s) per prompt, {cfg.max_new_tokens} new tokens, k = {cfg.k}, seed {cfg.seed}")
    print(
        "  items: "
        + ", ".join(f"{engine} {count}" for engine, count in sorted(per_engine.items()))
        + (f"; x {settings} sampling settings" if settings > 1 else "")
        + (f"; x {len(levels)} concurrency levels ({', '.join(map(str, levels))})" if len(levels) > 1 else "")
        + (f"; x {len(cfg.prefix_cache)} prompt-cache states ({', '.join(cfg.prefix_cache)})" if cfg.prefix_cache else "")
    )
    if resume:
        print(f"  resumed: {len(items) - len(left)} of {len(items)} items are recorded in {out}/; {len(left)} left to decode")
    if cfg.prefix_cache and "warm" in cfg.prefix_cache:
        print("  each warm request follows a one-token priming request of the same prompt on the same server")
    rates = measured_rates(cfg)
    if rates is None:
        print("  predicted time: unknown (no measured rate for this pair, backend or device); `--quick` measures one")
    else:
        screened_left = len({item.prompt.id for item in left if item.engine == SCREEN_ENGINE})
        engine_items = [item for item in items if item.engine != SCREEN_ENGINE]
        share_left = sum(item.engine != SCREEN_ENGINE for item in left) / len(engine_items) if engine_items else 0.0
        seconds = settings * predicted_seconds(cfg, screened_left, decoded, rates, share_left=share_left)
        print(
            f"  predicted time: about {_duration(seconds)} on {rates.machine} (rates from {rates.source}); screen, engines and analysis included"
        )
    return PlanOnly()
