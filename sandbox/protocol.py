"""The wire between the trusted evaluator and a sandbox worker: length-prefixed JSON
messages over a pair of pipes (never stdout, which the candidate may write to).

Every request carries a fresh nonce that the reply must echo, so a line the candidate writes
into the pipe at import time cannot pass for the answer to a later request. Tensors never
travel here: they go through the output arena the two processes share (sandbox.handoff).
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from collections.abc import Callable
from typing import Any

MAX_MESSAGE_BYTES = 32 * 1024 * 1024
_HEADER = struct.Struct(">I")


class ChannelClosed(Exception):
    """The other end closed its pipe (the worker died, or the parent went away)."""


class ChannelTimeout(Exception):
    """No complete message arrived within the deadline."""


class ProtocolViolation(Exception):
    """A message that is not a well-formed reply (too large, not JSON, wrong nonce)."""


def send(fd: int, message: dict[str, Any]) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolViolation(f"message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    payload = _HEADER.pack(len(data)) + data
    while payload:
        written = os.write(fd, payload)
        payload = payload[written:]


def _read_exactly(fd: int, count: int, deadline: float | None, poll: Callable[[], None] | None) -> bytes:
    chunks, remaining = [], count
    while remaining:
        wait = 0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic()))
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            if poll is not None:
                poll()
            if deadline is not None and time.monotonic() >= deadline:
                raise ChannelTimeout(f"no reply within the deadline ({remaining} of {count} bytes missing)")
            continue
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise ChannelClosed("pipe closed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, timeout_s: float | None = None, poll: Callable[[], None] | None = None) -> dict[str, Any]:
    """One message; `poll()` is called while waiting (e.g. to honour a cancel request)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size, deadline, poll))
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolViolation(f"announced message of {size} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        message = json.loads(_read_exactly(fd, size, deadline, poll))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolViolation(f"message is not JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise ProtocolViolation("message is not a JSON object")
    return message
