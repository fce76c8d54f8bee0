"""specguard: keep a vLLM speculative-decoding drafter only while it pays."""

__version__ = "0.1.0"

__all__ = ["__version__"]
