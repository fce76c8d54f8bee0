"""Generated text: filler words, never the prompt.

Every token is a short plain-ASCII word with a leading space, so a run of tokens is a
valid JSON string body without escaping (the server splices it into pre-encoded chunks).
"""

from __future__ import annotations

import random

_TEXT = """
the of and to in is that for it as with was on be by this are from at or an
model token step batch draft value state result system output signal vector
graph layer cache queue metric window sample latency stream verify accept
alpha beta gamma delta omega theta lambda sigma kappa rho
"""
WORDS: tuple[str, ...] = tuple(" " + w for w in _TEXT.split())

_POOL_WORDS = 8192


class Filler:
    """Runs of filler words taken from one pre-built string by slicing: O(1) per chunk
    instead of choosing and joining words on the hot path."""

    def __init__(self, rng: random.Random) -> None:
        words = rng.choices(WORDS, k=_POOL_WORDS)
        self._text = "".join(words) * 2
        self._offsets = [0]
        for w in words * 2:
            self._offsets.append(self._offsets[-1] + len(w))
        self._cursor = 0

    def take(self, n: int) -> str:
        """``n`` tokens of text (one word each)."""
        if n > _POOL_WORDS:
            return "".join(self.take(_POOL_WORDS) for _ in range(n // _POOL_WORDS)) + self.take(
                n % _POOL_WORDS
            )
        i = self._cursor
        self._cursor = (i + n) % _POOL_WORDS
        return self._text[self._offsets[i] : self._offsets[i + n]]


# Tool-call arguments: an opening fragment, filler words, a closing fragment, each one
# token, so the arguments are valid JSON when the call finishes naturally.
TOOL_OPEN = '{"query": "'
TOOL_CLOSE = '"}'


def tool_tokens(rng: random.Random, n: int) -> list[str]:
    """``n`` tokens of tool-call arguments (valid JSON once all ``n`` are joined)."""
    if n <= 0:
        return []
    if n == 1:
        return ["{}"]
    middle = [w.strip() + " " for w in rng.choices(WORDS, k=n - 2)]
    if middle:
        middle[-1] = middle[-1].rstrip()
    return [TOOL_OPEN, *middle, TOOL_CLOSE]
