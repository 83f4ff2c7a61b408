"""What llama-server's OpenAI route does with a client's request: a reproduction without specaudit.

Three observations behind an endpoint audit of llama-server that FAILs, each measured against a
running llama-server (start it yourself; stdlib only, no specaudit import):

1. Sampler defaults. /v1/completions fills every field the request leaves out from the server's
   own defaults (llama.cpp common_params_sampling: top_k 40, top_p 0.95, min_p 0.05, temperature
   0.8, the chain penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature). An
   OpenAI client that sends temperature, top_p and top_k only still samples under min_p 0.05: no
   emitted token is below 5 % of the most likely one. The script asks twice, once with the fields
   an OpenAI client sends and once with min_p 0 and the chain named, and counts the emitted tokens
   under that line. The returned logprobs are the model's own softmax (post_sampling_probs false),
   so they show what min_p removed.
2. Logprobs that skip tokens. A token whose text ends inside a multi-byte UTF-8 character gets no
   `logprobs.content` entry (llama.cpp's process_token adds a token's probabilities only once the
   text is valid UTF-8), so the list is shorter than usage.completion_tokens and a client that
   reads token ids from it loses the first token of every split character.
3. Drafting per request. With --spec-type ngram-simple, `timings.draft_n` per request: the
   lookup drafts only where the last n tokens occurred before in the prompt or output.

    llama-server -m MODEL.gguf --port 8081 --spec-type ngram-simple --spec-draft-n-max 3 \\
        --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 3
    python bench/llama_server_v1_repro.py http://127.0.0.1:8081 [--requests 40] [--tokens 32]
"""

from __future__ import annotations

import argparse
import json
import math
import urllib.request

PROMPTS = [
    "Write one sentence about the sea.",
    "List three colours.",
    "Translate 'thank you' into Japanese, Chinese and Greek.",
    "What is 12 times 7?",
    "Name two rivers in Africa.",
    "Write the word 'café' five times.",
    "Describe a cat in one line.",
    "Count from one to ten in words.",
]
MIN_P_DEFAULT = 0.05  # llama.cpp common_params_sampling.min_p
NEUTRAL = {"min_p": 0.0, "samplers": ["temperature", "top_k", "top_p"]}


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as answer:
        return json.load(answer)


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as answer:
        return json.load(answer)


def ask(base: str, prompt: str, seed: int, tokens: int, extra: dict) -> dict:
    body = {
        "prompt": f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n",
        "max_tokens": tokens,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,  # vLLM's "off"; llama-server clamps it to 0, also off
        "seed": seed,
        "logprobs": 20,
        "cache_prompt": False,
        **extra,
    }
    return post(f"{base}/v1/completions", body)


def under_min_p(answer: dict) -> tuple[int, int, int]:
    """(emitted tokens below MIN_P_DEFAULT x the top token's probability, entries with a top list,
    entries without one). A token accepted from a draft gets logprob 0 and no top list (llama.cpp
    fills neither for a verified batch), so it shows nothing about min_p."""
    below = shown = blank = 0
    for entry in answer["choices"][0]["logprobs"]["content"]:
        if not entry["top_logprobs"]:
            blank += 1
            continue
        top = max(t["logprob"] for t in entry["top_logprobs"])
        shown += 1
        below += entry["logprob"] < top + math.log(MIN_P_DEFAULT)
    return below, shown, blank


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="llama-server's base URL, without /v1")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    base = args.url.rstrip("/")
    props = get(f"{base}/props")
    defaults = props["default_generation_settings"].get("params", props["default_generation_settings"])
    print(f"llama-server build {props.get('build_info')}, model {props.get('model_path')}")
    print("server defaults:", {k: defaults.get(k) for k in ("temperature", "top_k", "top_p", "min_p", "repeat_last_n", "samplers")})
    used = ask(base, PROMPTS[0], 1, 2, {"verbose": True})["__verbose"]["generation_settings"]
    print("applied to a request with temperature 1, top_p 1, top_k -1:", {k: used.get(k) for k in ("top_k", "top_p", "min_p", "samplers")})

    totals = {"client fields only": [0, 0, 0, 0, 0], "min_p 0 and the chain sent": [0, 0, 0, 0, 0]}
    drafted = []
    for i in range(args.requests):
        prompt = PROMPTS[i % len(PROMPTS)]
        for label, extra in (("client fields only", {}), ("min_p 0 and the chain sent", NEUTRAL)):
            answer = ask(base, prompt, 1000 + i, args.tokens, extra)
            below, shown, blank = under_min_p(answer)
            row = totals[label]
            row[0] += below
            row[1] += shown
            row[2] += blank
            row[3] += answer["usage"]["completion_tokens"]
            row[4] += shown + blank != answer["usage"]["completion_tokens"]
            if label == "client fields only":
                timings = answer.get("timings") or {}
                drafted.append((timings.get("draft_n"), timings.get("draft_n_accepted")))
    for label, (below, shown, blank, generated, short) in totals.items():
        print(
            f"{label}: {below} of {shown} emitted tokens with a top list below min_p {MIN_P_DEFAULT} x the top token; "
            f"{blank} entries with logprob 0 and no top list (drafted); {generated} tokens generated (usage), "
            f"{shown + blank} logprobs entries; {short} of {args.requests} answers with fewer entries than tokens"
        )
    print("per request (draft_n, draft_n_accepted):", drafted)


if __name__ == "__main__":
    main()
