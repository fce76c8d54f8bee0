"""Reading Kubernetes objects as the API server sends them (plain nested dicts). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def lookup(obj: Any, *path: str) -> Any:
    """The value at ``path`` in nested mappings (``lookup(pod, "status", "phase")``), or None
    where a key is missing or a level is not a mapping."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj
