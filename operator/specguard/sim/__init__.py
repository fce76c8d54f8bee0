"""specguard.sim: a vLLM simulator with speculative-decoding economics (`specguard sim`).

The public surface: ``main(argv)`` (the command), ``start_sim`` / ``SimProcess`` (a simulator
subprocess for tests and other rooms), ``PROFILES`` (the calibrated model profiles) and
``signal_group``. Internals, one private module each:

_command        the CLI entry point and the server's lifecycle
_options        vLLM's serve flags plus the simulator's; _specconfig: --speculative-config checks
_server         the OpenAI-compatible HTTP routes; _openai_format: pre-encoded response bodies
_engine         continuous batching, step timing, acceptance draws; _profiles: calibrated costs
_virtual        the same engine run in model time without a server (a closed loop of clients,
                what bench/kimi_published.py and the calibration tests measure)
_exporter       vLLM's Prometheus metrics (read back with specguard.sources)
_domains        request domain and prompt-token estimates; _filler: generated text
_launch         ``start_sim``: a simulator subprocess

Test clients (a lean streaming load client, a /metrics reader) are in specguard_testkit.

See docs/simulator.md.
"""

from specguard.sim._command import main
from specguard.sim._launch import SimProcess, SimStartError, signal_group, start_sim
from specguard.sim._profiles import PROFILES, Profile

__all__ = [
    "PROFILES",
    "Profile",
    "SimProcess",
    "SimStartError",
    "main",
    "signal_group",
    "start_sim",
]
