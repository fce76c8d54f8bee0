"""Loopback addresses for pods: one 127.0.X.N per pod, released when the pod ends.

Linux routes all of 127.0.0.0/8 to the loopback device, so every pod can listen on its
own address at its container port, like pods with their own network namespace. Each
kubelet takes a /24 (127.0.X.0) where nothing listens yet, so two clusters started at the
same time on one machine (two pytest runs) do not hand out the same addresses.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path


def listening_addresses() -> set[str]:
    """IPv4 addresses with a listening TCP socket, from /proc/net/tcp."""
    addresses: set[str] = set()
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return addresses
    for line in lines:
        fields = line.split()
        if len(fields) < 4 or fields[3] != "0A":  # 0A = LISTEN
            continue
        hex_ip = fields[1].split(":")[0]
        octets = [str(int(hex_ip[i : i + 2], 16)) for i in range(6, -1, -2)]  # little endian
        addresses.add(".".join(octets))
    return addresses


def pick_subnet() -> str:
    """A '127.0.X' prefix in which no address listens yet."""
    busy = {addr.rsplit(".", 1)[0] for addr in listening_addresses()}
    candidates = [f"127.0.{x}" for x in range(10, 250)]
    random.shuffle(candidates)
    for prefix in candidates:
        if prefix not in busy:
            return prefix
    raise RuntimeError("no free 127.0.X.0/24 loopback range")


class LoopbackPool:
    """Hands out 127.0.X.2 .. 127.0.X.254 round robin (a fresh pod does not get the
    address a just-deleted pod may still be closing)."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix or pick_subnet()
        self._used: set[str] = set()
        self._next = 2
        self._lock = threading.Lock()

    def allocate(self) -> str:
        with self._lock:
            busy = listening_addresses()
            for _ in range(253):
                host = self._next
                self._next = 2 if self._next >= 254 else self._next + 1
                address = f"{self.prefix}.{host}"
                if address not in self._used and address not in busy:
                    self._used.add(address)
                    return address
        raise RuntimeError(f"no free pod address left in {self.prefix}.0/24")

    def release(self, address: str) -> None:
        with self._lock:
            self._used.discard(address)
