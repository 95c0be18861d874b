"""One deadline for a whole HTTP exchange over a plain socket, shared by typhapki's
stdlib HTTP clients (cfssl, typhapki/pki/signers/cfssl.py; the Kubernetes API,
typhapki/kubernetes/eviction.py): connecting, sending and every read get only the time
left, so a peer that trickles bytes cannot stretch a run; and the nesting of the JSON
they answer, measured without recursion.
"""

from __future__ import annotations

import io
import socket
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

MAX_JSON_DEPTH = 16  # the answers typhapki reads nest 3 or 4 levels


def json_depth(doc: object) -> int:
    """How deeply lists and objects nest in a decoded JSON document (iteratively)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(doc, 0)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            level += 1
            deepest = max(deepest, level)
            if deepest > MAX_JSON_DEPTH:
                break
            stack.extend((item, level) for item in value)
    return deepest


def time_left(deadline: float) -> float:
    """Seconds until `deadline`; a TimeoutError when it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


class DeadlineReader(io.RawIOBase):
    """A socket's bytes, each read given only the time left until the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._sock.settimeout(time_left(self._deadline))
        return self._sock.recv_into(buffer)


class DeadlineSocket:
    """What `http.client.HTTPResponse` reads from: `makefile` over a DeadlineReader."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(DeadlineReader(self._sock, self._deadline))
