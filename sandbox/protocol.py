"""The wire between the trusted evaluator and a sandbox worker: length-prefixed JSON
messages over a pair of pipes (never stdout, which the candidate may write to).

Every request carries a fresh nonce that the reply must echo, so a line the candidate writes
into the pipe at import time cannot pass for the answer to a later request. The nonce is no
secret from the candidate, which shares the worker's process (it can read it from a frame): a
frame it forges with the right nonce is caught on the trusted side instead, as a second reply
to one request (`Worker.request` counts every frame that answered nothing), and nothing a reply
claims decides a verdict unless the judge verifies it (docs/threat-model.md). Tensors never
travel here: they go through the output arena the two processes share (sandbox.handoff).

`send` and `receive` hold what they call as default arguments, bound when this module is
imported (before any candidate code in a worker), so a candidate that replaces `json.dumps`,
`os.write` or this module's attributes does not change what the worker writes.
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


def send(
    fd: int,
    message: dict[str, Any],
    *,
    _dumps: Callable[..., str] = json.dumps,
    _write: Callable[[int, bytes], int] = os.write,
    _pack: Callable[[int], bytes] = _HEADER.pack,
) -> None:
    data = _dumps(message, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolViolation(f"message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    payload = _pack(len(data)) + data
    while payload:
        written = _write(fd, payload)
        payload = payload[written:]


def _read_exactly(
    fd: int,
    count: int,
    deadline: float | None,
    poll: Callable[[], None] | None,
    *,
    _clock: Callable[[], float] = time.monotonic,
    _select: Callable[..., Any] = select.select,
    _read: Callable[[int, int], bytes] = os.read,
) -> bytes:
    chunks, remaining = [], count
    while remaining:
        wait = 0.2 if deadline is None else max(0.0, min(0.2, deadline - _clock()))
        ready, _, _ = _select([fd], [], [], wait)
        if not ready:
            if poll is not None:
                poll()
            if deadline is not None and _clock() >= deadline:
                raise ChannelTimeout(f"no reply within the deadline ({remaining} of {count} bytes missing)")
            continue
        chunk = _read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise ChannelClosed("pipe closed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def receive(
    fd: int,
    timeout_s: float | None = None,
    poll: Callable[[], None] | None = None,
    *,
    _clock: Callable[[], float] = time.monotonic,
    _read_exactly: Callable[..., bytes] = _read_exactly,
    _unpack: Callable[[bytes], tuple[int]] = _HEADER.unpack,
    _loads: Callable[..., Any] = json.loads,
) -> dict[str, Any]:
    """One message; `poll()` is called while waiting (e.g. to honour a cancel request)."""
    deadline = None if timeout_s is None else _clock() + timeout_s
    (size,) = _unpack(_read_exactly(fd, _HEADER.size, deadline, poll))
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolViolation(f"announced message of {size} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        message = _loads(_read_exactly(fd, size, deadline, poll))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolViolation(f"message is not JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise ProtocolViolation("message is not a JSON object")
    return message
