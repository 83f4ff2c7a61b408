"""specaudit: audit speculative decoding for correctness and fairness.

    >>> import specaudit
    >>> pair = specaudit.load_pair("default", "int8")           # embedded SmolLM2-135M + int8 draft
    >>> prompts = specaudit.load_prompts("core", per_group=5)
    >>> specaudit.run(specaudit.RunConfig(), "runs/a", pair=pair, prompt_set=prompts)
    >>> snapshot = specaudit.analyze("runs/a", pair=pair)      # the typed Snapshot, also written to snapshot.json
    >>> snapshot.equivalence.status
    >>> specaudit.audit_sampler(my_verify, vocab_size=1000, k=4)  # unit audit of a rejection step

The names below are the stable API; the modules behind them are private in spirit. They are
imported on first use, so `specaudit prompts list` does not pay for importing torch.
"""

from importlib.metadata import PackageNotFoundError, version

from specaudit._lazy import lazy_exports

_PUBLIC = {
    "GroupFrame": "specaudit.stats",
    "InputError": "specaudit.errors",
    "RunConfig": "specaudit.config",
    "SamplingSpec": "specaudit.decoding",
    "analyze": "specaudit.analysis",
    "audit": "specaudit.audit",
    "audit_sampler": "specaudit.stats",
    "evaluate_gate": "specaudit.gate",
    "goodness_of_fit": "specaudit.stats",
    "load_pair": "specaudit.models",
    "load_prompts": "specaudit.prompts",
    "mitigate": "specaudit.mitigate",
    "read_records": "specaudit.execution.records",
    "reference_verify": "specaudit.decoding",
    "render_report": "specaudit.report",
    "run": "specaudit.engines",
    "score_records": "specaudit.stats",
    "two_sample": "specaudit.stats",
    "validate_prompt_set": "specaudit.prompts",
    "warp": "specaudit.decoding",
}

try:
    __version__ = version("specaudit")
except PackageNotFoundError:  # a source tree that was not installed
    __version__ = "0+unknown"

__all__ = [*sorted(_PUBLIC), "__version__"]

__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
