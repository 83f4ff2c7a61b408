"""The `llama-speculative` command line of one record: models, prompt, budget, seed, the whole
sampler chain and the tree's shape, nothing left to the program's defaults.

Sampling: `--samplers top_k;top_p;temperature` (then llama.cpp's `dist`), the order of the
in-process llama.cpp control (engines.llama_cpp_runtime: top-k, top-p, then temperature; a run with
temperature != 1 and top-p < 1 is refused there and here, so the order never changes the law);
every other stage neutral and, as well, out of the chain: `--min-p 0`, `--typical 1`,
`--repeat-penalty 1`, `--repeat-last-n 0`, `--presence-penalty 0`, `--frequency-penalty 0`,
`--dry-multiplier 0`, `--xtc-probability 0`, `--top-n-sigma -1`, `--mirostat 0`,
`--dynatemp-range 0`. Temperature 0 is the program's greedy path (`--temp 0`, verification by
the target's argmax). The debug verbosity (`-lv 5`) prints the per-token log lines that
engines.llama_speculative.log reads; the example has no other output of token ids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from specaudit.decoding import SamplingSpec
    from specaudit.engines.llama_speculative.settings import LlamaSpeculativeSettings

SAMPLERS = "top_k;top_p;temperature"
DEBUG_VERBOSITY = 5  # LOG_LEVEL_DEBUG (common/log.h): LOG_DBG lines reach stderr at this threshold
NEUTRAL_FLAGS = (
    ("--min-p", "0"),
    ("--typical", "1"),
    ("--repeat-penalty", "1"),
    ("--repeat-last-n", "0"),
    ("--presence-penalty", "0"),
    ("--frequency-penalty", "0"),
    ("--dry-multiplier", "0"),
    ("--xtc-probability", "0"),
    ("--top-n-sigma", "-1"),
    ("--mirostat", "0"),
    ("--dynatemp-range", "0"),
)


def sampling_flags(spec: SamplingSpec) -> list[str]:
    """The run's temperature, top-k and top-p as flags, with every other stage neutral."""
    if spec.greedy:
        temp, top_k, top_p = "0", "0", "1"
    else:
        temp, top_k, top_p = f"{spec.temperature:.9g}", str(int(spec.top_k)), f"{spec.top_p:.9g}"
    flags = ["--samplers", SAMPLERS, "--temp", temp, "--top-k", top_k, "--top-p", top_p]
    for name, value in NEUTRAL_FLAGS:
        flags += [name, value]
    return flags


def command(
    binary: Path,
    target: Path,
    draft: Path,
    prompt: str,
    *,
    spec: SamplingSpec,
    max_new_tokens: int,
    seed: int,
    k: int,
    settings: LlamaSpeculativeSettings,
    threads: int,
    ctx: int,
) -> list[str]:
    """argv of one record's process (no shell: the prompt is one argument, byte for byte)."""
    return [
        str(binary),
        "-m",
        str(target),
        "-md",
        str(draft),
        "-p",
        prompt,
        "-n",
        str(max_new_tokens),
        "--seed",
        str(seed),
        *sampling_flags(spec),
        "--spec-draft-n-max",
        str(k),
        "-np",
        str(settings.n_parallel),
        "--draft-p-split",
        f"{settings.p_split:.9g}",
        "-c",
        str(ctx),
        "-t",
        str(threads),
        "-tb",
        str(threads),
        "-td",
        str(threads),
        "-lv",
        str(DEBUG_VERBOSITY),
        *settings.extra_args,
    ]


__all__ = ["DEBUG_VERBOSITY", "NEUTRAL_FLAGS", "SAMPLERS", "command", "sampling_flags"]
