"""Flags that audit servers: `--speculative-url URL --vanilla-url URL [--model M] [--api-key-env VAR]`
(the endpoint's settings section of a config file, as flags; flags win) and `--concurrency`, which means
requests in flight for every engine that serves requests (endpoint, llama-server) and is refused
for the others."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from specaudit.contracts.engines import engine_settings
from specaudit.errors import InputError

if TYPE_CHECKING:
    from specaudit.config import RunConfig
    from specaudit.contracts.engines import EngineSpec

ENDPOINT_FLAGS = {  # flag dest -> (endpoint setting, the flag)
    "speculative_url": ("speculative_url", "--speculative-url"),
    "vanilla_url": ("vanilla_url", "--vanilla-url"),
    "served_model": ("model", "--model"),
    "api_key_env": ("api_key_env", "--api-key-env"),
    "mix_sampling": ("mix_sampling", "--mix-sampling"),
}
# the endpoint settings that a flag fills in besides its own (`--model` names both sides' models)
_ALSO_SET = {"model": ("speculative_model", "vanilla_model"), "concurrency": ("concurrency_levels",)}


def _served() -> EngineSpec:
    """The engine whose servers the server flags name (the registry's `url_flags`)."""
    from specaudit.contracts.engines import ENGINES

    return next(spec for spec in ENGINES.values() if spec.url_flags)


def add_server_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("your servers (--engines endpoint; docs/servers.md)")
    g.add_argument(
        "--speculative-url", help="base URL of your OpenAI-compatible server with speculative decoding on, e.g. http://host:8000/v1"
    )
    g.add_argument("--vanilla-url", help="base URL of the same model served with speculative decoding off")
    g.add_argument("--model", dest="served_model", help="the model name the servers serve (default: the one model they list)")
    g.add_argument("--api-key-env", help="name of an environment variable holding the servers' API key")
    g.add_argument(
        "--mix-sampling",
        metavar="SETTING",
        help="mixed traffic: keep requests at this sampling setting (e.g. t=1) in flight on each server while the plan runs, "
        "unrecorded, so the servers' batches mix settings (endpoint.mix_in_flight of them, default 4)",
    )
    g.add_argument(
        "--concurrency",
        help="requests in flight: one number (one pass) or a comma list of levels, the plan once per level "
        "(endpoint default: one pass at 4; llama-server default 1,4; openvino default 1: one request per call)",
    )
    g.add_argument(
        "--prefix-cache",
        help="cold, warm or cold,warm: the plan once per prompt-cache state; warm requests follow a request with the same "
        "prompt, cache on (--engines llama-server or endpoint; docs/request-features.md)",
    )


def endpoint_options(args: argparse.Namespace, run_options: dict) -> dict:
    """The run options that the server flags set: engines=endpoint and the config's `endpoint:`
    section overlaid with the flags; {} without any server flag."""
    given = {setting: getattr(args, dest) for dest, (setting, _) in ENDPOINT_FLAGS.items() if getattr(args, dest, None) is not None}
    if not given:
        return {}
    served = _served()
    engines = getattr(args, "engines", None)
    if engines is not None and engines.strip() != served.name:
        flags = ", ".join(flag for dest, (_, flag) in ENDPOINT_FLAGS.items() if getattr(args, dest, None) is not None)
        raise InputError(f"{flags} audit your servers (--engines {served.name}), not --engines {engines}; drop --engines or those flags")
    if getattr(args, "target", None) is None and "target" not in run_options:
        # the default target's tokenizer would turn the prompts into another model's token ids, unseen
        raise InputError(
            "--speculative-url audits your servers: name their model's tokenizer with --target (an HF id or folder, "
            "e.g. --target meta-llama/Llama-3.1-8B-Instruct), as specaudit sends token ids"
        )
    section = {**engine_settings(run_options, served.name), **given}
    for url in ("speculative_url", "vanilla_url"):
        if not section.get(url):
            raise InputError(f"--{url.replace('_', '-')} is missing: an endpoint audit compares two servers, speculation on and off")
    unset = dict.fromkeys(option for option, _ in served.options)  # an older config's top-level section is merged above
    return {"engines": served.name, **unset, "extra": {**(run_options.get("extra") or {}), served.section: section}}


def typed_server_flags(args: argparse.Namespace) -> dict[str, str]:
    """The endpoint settings given as flags, each by its config key -> the flag typed
    (_validation.register_typed)."""
    given = {setting: flag for dest, (setting, flag) in ENDPOINT_FLAGS.items() if getattr(args, dest, None) is not None}
    if getattr(args, "concurrency", None) is not None:
        given["concurrency"] = "--concurrency"
    given.update({other: given[setting] for setting, others in _ALSO_SET.items() if setting in given for other in others})
    typed = {f"{_served().section}.{setting}": flag for setting, flag in given.items()}
    if "concurrency" in given:  # the levels of every engine that serves requests, in its section of `extra:`
        from specaudit.contracts.engines import ENGINES

        sections = [spec.section for spec in ENGINES.values() if spec.concurrency]
        typed.update({f"{prefix}{section}.concurrency_levels": "--concurrency" for section in sections for prefix in ("", "extra.")})
    return typed


def _levels(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InputError(f"--concurrency must be integers such as 4 or 1,4, got {text!r}") from None


def with_server_flags(args: argparse.Namespace, make: Callable[[dict], RunConfig], run_options: dict) -> RunConfig:
    """The RunConfig `make(extra options)` builds, with the server flags: the served engine's section
    (--speculative-url, ...), and --concurrency as the levels of the engine that serves requests,
    set by its own settings module (the registry's `concurrency`)."""
    from specaudit.contracts.engines import ENGINES, resolve

    extra = endpoint_options(args, run_options)
    concurrency = getattr(args, "concurrency", None)
    cfg = make(extra)
    if concurrency is None:
        return cfg
    levels = _levels(concurrency)
    serving = [ENGINES[name] for name in cfg.engines if ENGINES[name].concurrency]
    if len(cfg.engines) == 1 and serving:
        (spec,) = serving
        sections = dict(cfg.extra)
        sections[spec.section] = resolve(spec.settings).with_concurrency(cfg.extra.get(spec.section), levels)
        return make({**extra, **dict.fromkeys(option for option, _ in spec.options), "extra": sections})
    names = ", ".join(name for name, spec in ENGINES.items() if spec.concurrency)
    raise InputError(
        f"--concurrency applies to engines that serve requests in batches (--engines {names}), not --engines {','.join(cfg.engines)}"
    )
