"""specguard.sim: a vLLM simulator with speculative-decoding economics (`specguard sim`).

command   the CLI entry point (``main(argv)``) and the server's lifecycle
options   vLLM's serve flags plus the simulator's; specconfig: --speculative-config checks
server    the OpenAI-compatible HTTP routes; openai_format: pre-encoded response bodies
engine    continuous batching, step timing, acceptance draws; profiles: calibrated costs
exporter  vLLM's Prometheus metrics (read back with specguard.sources.exposition)
domains   request domain and prompt-token estimates; filler: generated text
launch    ``start_sim``: a simulator subprocess for tests and other rooms

Test clients (a lean streaming load client, a /metrics reader) are in
specguard.testing.loadclient.

See docs/simulator.md.
"""

__all__ = [
    "command",
    "domains",
    "engine",
    "exporter",
    "filler",
    "launch",
    "openai_format",
    "options",
    "profiles",
    "server",
    "specconfig",
]
