"""specguard: keep a vLLM speculative-decoding drafter only while it pays."""

__version__ = "0.1.0"
