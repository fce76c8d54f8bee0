"""Drafter economics by domain on real text: SmolLM2-135M-Instruct on real vLLM (CPU) with no
drafter, the ngram drafter and its layer-skipped draft model (docs/real-text.md).

    .venv/bin/python bench/realtext.py [--prompts 3] [--max-tokens 48] [--concurrency 1,2,4]
        [--domains tool_call,rag,math_reasoning,chat,copy] [--ngram-k 4] [--no-skip-draft]

The prompts are the first N of each shipped prompt set (operator/specguard/evaluate/prompts:
tool calls with JSON-schema tools, retrieval answers citing their passages, math reasoning, open
chat; ``--domains copy``: three edits whose answer repeats its input, defined here), greedy
(temperature 0), max_tokens as given. The model has no tool parser, so a tool
prompt's schemas go into its system message as JSON (as a tool chat template would put them).

Starts one server at a time with the flags `specguard render` gives the arm
(``specguard_testkit._realvllm.pretrained_argv``), sends each domain's prompts at each
concurrency (at least as many requests as streams), and prints: time to /health and PSS per
server; per domain the mean acceptance length from the server's spec-decode counters
(1 + accepted / drafts, the target's own token included); and per domain and concurrency the
median per-token latency of each arm (client side: (t_last - t_first) / (tokens - 1)) with its
ratio to no drafter. Timing figures depend on the machine's load (printed); no text is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import urllib.request
from collections.abc import Sequence

import aiohttp

from specguard._exposition import Reading, acceptance_between, parse_reading
from specguard.evaluate._promptset import Prompt, load_builtin
from specguard_testkit import (
    SimProcess,
    find_real_vllm,
    free_port,
    group_pss_mib,
    start_vllm,
    stream_once,
)
from specguard_testkit._realvllm import SERVED_NAME, pretrained_argv

DOMAINS = {"tool_call": "tool calls", "rag": "retrieval", "math_reasoning": "math",
           "chat": "open chat", "copy": "copy edits"}  # fmt: skip
SHIPPED = ("tool_call", "rag", "math_reasoning", "chat")

# The "copy" domain (not a shipped prompt set; --domains copy): edits whose answer is its input
# again with a small change -- a config with one value changed, a paragraph with a typo fixed,
# a function with a renamed variable. Prompt lookup's home ground: most of the answer is a
# span of the prompt. Written for this bench.
_CONFIG = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "checkout-api", "namespace": "shop", "labels": {"app": "checkout-api",
                 "tier": "backend", "team": "payments"}},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "checkout-api"}},
             "template": {"metadata": {"labels": {"app": "checkout-api"}},
                          "spec": {"containers": [{
                              "name": "api", "image": "registry.example.com/checkout-api:1.14.2",
                              "ports": [{"containerPort": 8080, "name": "http"}],
                              "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                                            "limits": {"cpu": "1", "memory": "512Mi"}}}]}}},
}  # fmt: skip
_PARAGRAPH = (
    "The warehouse opens at seven in the morning and closes at six in the evening on weekdays. "
    "Deliveries that arrive after five are stored in the cold room overnight and checked in "
    "the next morning by the first shift. Drivers must sign the logbook at the gate, show "
    "their delivery note, and wait in the marked bay until a forklift operater is free."
)
_CODE = (
    "def total_price(items, tax_rate):\n"
    "    subtotal = 0\n"
    "    for item in items:\n"
    "        subtotal += item.price * item.quantity\n"
    "    tax = subtotal * tax_rate\n"
    "    return round(subtotal + tax, 2)\n"
)
COPY_PROMPTS: tuple[Prompt, ...] = tuple(
    Prompt(subset="copy", messages=({"role": "user", "content": text},))
    for text in (
        "Change replicas to 3 in this Kubernetes manifest and return the whole manifest as "
        f"JSON, nothing else.\n\n{json.dumps(_CONFIG, indent=2)}",
        "Fix the spelling mistake in this paragraph and return the whole paragraph, otherwise "
        f"unchanged.\n\n{_PARAGRAPH}",
        "Rename the variable subtotal to net in this Python function and return the whole "
        f"function, nothing else.\n\n{_CODE}",
    )
)


def domain_prompts(domain: str) -> list[Prompt]:
    return list(COPY_PROMPTS) if domain == "copy" else load_builtin(domain)


def body(prompt: Prompt, max_tokens: int) -> bytes:
    messages = [dict(m) for m in prompt.messages or ()]
    if prompt.tools:
        schemas = json.dumps([dict(t) for t in prompt.tools])
        tools = ("You can call these tools; to call one, answer with a JSON object "
                 f'{{"name": ..., "arguments": {{...}}}}.\nTools: {schemas}')  # fmt: skip
        if messages and messages[0].get("role") == "system":
            messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{tools}"}
        else:
            messages.insert(0, {"role": "system", "content": tools})
    return json.dumps({
        "model": SERVED_NAME, "messages": messages, "max_tokens": max_tokens,
        "temperature": 0.0, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }).encode()  # fmt: skip


def metrics(url: str) -> Reading:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        return parse_reading(resp.read().decode())


async def per_token(url: str, bodies: Sequence[bytes], concurrency: int) -> list[float]:
    """Per-token latency of each request, ``concurrency`` streams at a time."""
    queue = list(bodies)
    tpots: list[float] = []
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as session:

        async def worker() -> None:
            while queue:
                record = await stream_once(session, url, queue.pop(0), headers,
                                           path="/v1/chat/completions")  # fmt: skip
                if record.tpot is not None:
                    tpots.append(record.tpot)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tpots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=3, help="per domain")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--concurrency", default="1,2,4")
    parser.add_argument("--domains", default=",".join(SHIPPED), help="also: copy")
    parser.add_argument("--ngram-k", default="4", help="ngram's k, one arm each")
    parser.add_argument("--no-skip-draft", action="store_true")
    opts = parser.parse_args()
    levels = [int(x) for x in opts.concurrency.split(",")]
    real = find_real_vllm()
    prompts = {d: [body(p, opts.max_tokens) for p in domain_prompts(d)[: opts.prompts]]
               for d in opts.domains.split(",")}  # fmt: skip
    # arm name -> (drafter, k): no drafter, ngram at each k, the skip draft at its own k
    arms: dict[str, tuple[str | None, int | None]] = {"off": (None, None)}
    ks = [int(x) for x in opts.ngram_k.split(",")]
    for ngram_k in ks:
        arms["ngram" if ks == [4] else f"ngram k={ngram_k}"] = ("ngram", ngram_k)
    if not opts.no_skip_draft:
        arms["skip-draft"] = ("skip-draft", None)
    tpot: dict[tuple[str, str, int], float] = {}  # (arm, domain, streams) -> median s/token
    accept: dict[tuple[str, str], float | None] = {}
    for name, (drafter, k) in arms.items():
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        server: SimProcess = start_vllm(pretrained_argv(real, drafter, k), port=free_port())
        try:
            took = time.monotonic() - t0
            # warm-up: one request per domain (the first steps of a server, and of its
            # drafter, are slow: allocation, ngram's numba kernels compile on first use)
            asyncio.run(per_token(server.url, [b[0] for b in prompts.values()], 1))
            print(f"{name:10} ready in {took:5.1f} s (load {load:.1f}), "
                  f"PSS {group_pss_mib(server.pid):5.0f} MiB", flush=True)  # fmt: skip
            for domain, bodies in prompts.items():
                before = metrics(server.url)
                for c in levels:
                    sent = [bodies[i % len(bodies)] for i in range(max(c, len(bodies)))]
                    tpot[name, domain, c] = statistics.median(
                        asyncio.run(per_token(server.url, sent, c))
                    )
                acceptance = acceptance_between(before, metrics(server.url))
                accept[name, domain] = acceptance.length if acceptance else None
            print(f"{name:10} done (load {os.getloadavg()[0]:.1f}), "
                  f"PSS {group_pss_mib(server.pid):5.0f} MiB", flush=True)  # fmt: skip
        finally:
            server.stop(timeout=30)
    drafters = [a for a in arms if a != "off"]
    head = "| domain | " + " | ".join(f"acceptance {d}" for d in drafters)
    for c in levels:
        head += f" | off ms/token, {c} | " + " | ".join(f"{d} ÷ off, {c}" for d in drafters)
    head += " |"
    print("\n" + head)
    print("|" + "---|" * (head.count("|") - 1))
    for domain in prompts:
        label = DOMAINS.get(domain, domain)
        cells = [f"{accept[d, domain]:.2f}" if accept[d, domain] else "-" for d in drafters]
        for c in levels:
            base = tpot["off", domain, c]
            cells.append(f"{base * 1000:.1f}")
            cells += [f"{tpot[d, domain, c] / base:.2f}" for d in drafters]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
