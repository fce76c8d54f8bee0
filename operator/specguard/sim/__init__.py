"""specguard.sim: a vLLM simulator with speculative-decoding economics (`specguard sim`).

command   the CLI entry point (``main(argv)``) and the server's lifecycle
options   vLLM's serve flags plus the simulator's; specconfig: --speculative-config checks
server    the OpenAI-compatible HTTP routes; openai_format: pre-encoded response bodies
engine    continuous batching, step timing, acceptance draws; profiles: calibrated costs
metrics   vLLM's Prometheus metrics; scrape: reading them back
domains   request domain and prompt-token estimates; filler: generated text
launch    ``start_sim``: a simulator subprocess for tests and other rooms
loadclient  a lean streaming client for tests and bench/sim_fidelity.py

See docs/simulator.md.
"""
