"""What a vLLM-compatible server answers, reduced to its shape, to compare the simulator with
real vLLM (tests/sim/test_sim_fidelity.py against the recording committed there, and
tests/realvllm against the live server).

``record(url, model)`` sends the same few requests the recording holds — streamed chat and
completion with continuous usage, their non-streamed forms, two refusals — and reads
/metrics; ``shape`` turns a JSON value into its keys and value types (``"str"``, ``"int"``,
``"null"``, ...), so two servers agree when their bodies have the same fields of the same
kinds, whatever the text and numbers.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

Shape = Any


def shape(value: Any) -> Shape:
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        # lists of one kind (choices, tool calls): the shape of the first element
        return [shape(value[0])] if value else []
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "str"


def _events(client: httpx.Client, url: str, body: dict[str, Any]) -> list[Any]:
    events: list[Any] = []
    with client.stream("POST", url, json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if line.startswith("data: "):
                data = line[len("data: "):]
                events.append(data if data == "[DONE]" else json.loads(data))
    return events


def stream_shapes(events: list[Any]) -> dict[str, Shape]:
    """The first chunk, a middle one, the last with choices, the usage chunk, the end."""
    chunks = [e for e in events if isinstance(e, dict)]
    with_choices = [e for e in chunks if e.get("choices")]
    usage_only = [e for e in chunks if not e.get("choices")]
    return {
        "first": shape(with_choices[0]),
        "middle": shape(with_choices[len(with_choices) // 2]),
        "last": shape(with_choices[-1]),
        "usage": shape(usage_only[-1]) if usage_only else None,
        "end": events[-1] if events and events[-1] == "[DONE]" else None,
    }


def metric_families(text: str) -> dict[str, dict[str, Any]]:
    """vllm:* families: type, label names and sample suffixes (``_total``, ``_created``...)."""
    out: dict[str, dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:"):
            continue
        labels = sorted({k for s in family.samples for k in s.labels if k not in ("le",)})
        suffixes = sorted({s.name[len(family.name):] for s in family.samples})
        out[family.name] = {"type": family.type, "labels": labels, "suffixes": suffixes}
    return out


def record(url: str, model: str) -> dict[str, Any]:
    """The recording of ``url`` (a server of ``model``): see the module docstring."""
    usage = {"include_usage": True, "continuous_usage_stats": True}
    chat = {"model": model, "messages": [{"role": "user", "content": "Tell me a story."}],
            "max_tokens": 8, "temperature": 0.0}  # fmt: skip
    completion = {"model": model, "prompt": "Once upon a time", "max_tokens": 8,
                  "temperature": 0.0}  # fmt: skip
    with httpx.Client(base_url=url, timeout=60) as client:
        out: dict[str, Any] = {
            "chat_stream": stream_shapes(_events(
                client, "/v1/chat/completions", {**chat, "stream": True, "stream_options": usage})),
            "completion_stream": stream_shapes(_events(
                client, "/v1/completions", {**completion, "stream": True,
                                            "stream_options": usage})),
            "chat": shape(client.post("/v1/chat/completions", json=chat).json()),
            "completion": shape(client.post("/v1/completions", json=completion).json()),
        }  # fmt: skip
        refusals = {
            "unknown_model": ("/v1/completions", {**completion, "model": "no-such-model"}),
            "too_long": ("/v1/completions", {**completion, "max_tokens": 10**6}),
        }
        for name, (path, body) in refusals.items():
            resp = client.post(path, json=body)
            out[name] = {"status": resp.status_code, "body": shape(resp.json())}
        out["health"] = client.get("/health").status_code
        out["metrics"] = metric_families(client.get("/metrics").text)
    return out


# Families specguard reads (sources, the guardrails, evaluate): the simulator must export them
# as vLLM does.
READ = (
    "vllm:request_time_per_output_token_seconds",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
    "vllm:generation_tokens",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
)


def compare(sim: dict[str, Any], real: dict[str, Any]) -> list[str]:
    """Every disagreement between two recordings, one line each (empty: they agree)."""
    problems: list[str] = []
    for key in sorted(set(real) - {"metrics"}):
        if sim.get(key) != real[key]:
            problems.append(f"{key}: simulator {json.dumps(sim.get(key))[:400]} "
                            f"!= vLLM {json.dumps(real[key])[:400]}")  # fmt: skip
    for name, family in sim["metrics"].items():
        if name not in real["metrics"]:
            problems.append(f"metric {name}: vLLM has no such family")
        elif family != real["metrics"][name]:
            problems.append(f"metric {name}: simulator {family} != vLLM {real['metrics'][name]}")
    for name in READ:
        for family in (name, f"{name}_created"):
            if family in real["metrics"] and family not in sim["metrics"]:
                problems.append(f"metric {family}: vLLM exports it, the simulator does not")
    return problems
