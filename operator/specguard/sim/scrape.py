"""Read a simulator's (or vLLM's) /metrics with prometheus_client's parser."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str, timeout: float = 5.0) -> Samples:
    """GET ``url``/metrics as {(sample name, sorted label pairs): value}."""
    with urllib.request.urlopen(url + "/metrics", timeout=timeout) as resp:
        text = resp.read().decode()
    return parse(text)


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels``."""
    return sum(
        v
        for (n, lab), v in samples.items()
        if n == name and all(dict(lab).get(k) == want for k, want in labels.items())
    )


def acceptance_length(before: Samples, after: Samples) -> float:
    """Mean acceptance length between two scrapes: 1 + accepted / drafts."""
    drafts = value(after, "vllm:spec_decode_num_drafts_total") - value(
        before, "vllm:spec_decode_num_drafts_total"
    )
    accepted = value(after, "vllm:spec_decode_num_accepted_tokens_total") - value(
        before, "vllm:spec_decode_num_accepted_tokens_total"
    )
    return 1.0 + accepted / drafts if drafts else float("nan")
