"""The job queue in front of the accelerators, shared by every client of one server.

Timed work (performance measurement, profiling) takes a device exclusively, so no two
timings, and no correctness run, ever overlap on one GPU. Correctness-only work may share
devices, up to a limit across the whole server. Jobs start in arrival order (a job waits
behind an earlier one even if its own resource is free), so a stream of small jobs cannot
starve a timed one. Waiting jobs learn their position whenever it changes.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

import anyio

JobKind = Literal["timed", "correctness"]
PositionCallback = Callable[[int, int], Awaitable[None]]


@dataclass
class _Device:
    name: str
    timed: bool = False
    correctness: int = 0


@dataclass
class _Waiter:
    id: int
    kind: JobKind


@dataclass
class QueueState:
    """A snapshot for status messages and tests."""

    running: dict[str, list[str]] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)


class GpuQueue:
    """Grants devices to jobs: exclusive for timed work, shared (within a limit) for correctness work."""

    def __init__(self, devices: Sequence[str], correctness_limit: int = 2):
        if not devices:
            raise ValueError("GpuQueue needs at least one device")
        if correctness_limit < 1:
            raise ValueError("correctness_limit must be at least 1")
        self._devices = [_Device(name) for name in devices]
        self.correctness_limit = correctness_limit
        self._waiting: list[_Waiter] = []
        self._ids = itertools.count(1)
        self._changed: anyio.Event | None = None  # made on first use: an Event needs a running event loop

    @property
    def devices(self) -> list[str]:
        return [d.name for d in self._devices]

    def _signal(self) -> None:
        if self._changed is not None:
            self._changed.set()
        self._changed = anyio.Event()

    def _current_change(self) -> anyio.Event:
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed

    def _pick(self, kind: JobKind) -> _Device | None:
        if kind == "timed":
            return next((d for d in self._devices if not d.timed and d.correctness == 0), None)
        if sum(d.correctness for d in self._devices) >= self.correctness_limit:
            return None
        free = [d for d in self._devices if not d.timed]
        return min(free, key=lambda d: d.correctness) if free else None

    @asynccontextmanager
    async def slot(self, kind: JobKind, on_position: PositionCallback | None = None) -> AsyncIterator[str]:
        """Wait for a device for one job of `kind`; yields the device name and frees it on exit.

        `on_position(position, waiting)` is awaited each time this job's place in the queue
        changes (1 = next to start)."""
        me = _Waiter(next(self._ids), kind)
        self._waiting.append(me)
        device: _Device | None = None
        try:
            last_position = 0
            while True:
                # No await between the check and the grant: the grant is atomic on the event loop.
                if self._waiting[0] is me and (device := self._pick(kind)) is not None:
                    self._waiting.remove(me)
                    if kind == "timed":
                        device.timed = True
                    else:
                        device.correctness += 1
                    self._signal()
                    break
                changed = self._current_change()
                position = self._waiting.index(me) + 1
                if on_position is not None and position != last_position:
                    last_position = position
                    await on_position(position, len(self._waiting))
                    continue
                await changed.wait()
        except BaseException:
            if me in self._waiting:
                self._waiting.remove(me)
                self._signal()
            raise
        try:
            yield device.name
        finally:
            if kind == "timed":
                device.timed = False
            else:
                device.correctness -= 1
            self._signal()

    def state(self) -> QueueState:
        running: dict[str, list[str]] = {}
        for d in self._devices:
            jobs = (["timed"] if d.timed else []) + ["correctness"] * d.correctness
            running[d.name] = jobs
        return QueueState(running=running, waiting=[w.kind for w in self._waiting])
