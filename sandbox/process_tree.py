"""The processes below one process, read from /proc (trusted side): what a worker's supervisor kills,
and whose open files the scratch watchdog counts. Only descendants are ever signalled: a non-root
server shares its uid with its workers and with its other workers' processes."""

from __future__ import annotations

import os
import signal
import time

_KILL_ROUNDS = 1000  # a fork can race each round; a killed process forks no more, so few rounds are needed


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command name (state, parent, ...); None once gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields if len(fields) > 1 else None


def parent_of(pid: int) -> int | None:
    """The parent pid from /proc/<pid>/stat (None once the process is gone)."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[1])


def start_ticks(pid: int) -> int | None:
    """A process's start time (clock ticks since boot): with its pid, it names one process ever."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def ending(pid: int) -> bool:
    """A zombie, or gone: its descriptors are closed (and /proc shows them as root's)."""
    fields = _stat_fields(pid)
    return fields is None or fields[0] in (b"Z", b"X")


def descendants(root: int) -> set[int]:
    """Every process whose chain of parents reaches `root` now (one pass over /proc/*/stat: the
    per-task `children` files are absent from kernels built without CONFIG_PROC_CHILDREN)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            parent = parent_of(int(name))
            if parent is not None:
                children.setdefault(parent, []).append(int(name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for kid in children.get(todo.pop(), ()):
            if kid not in found:
                found.add(kid)
                todo.append(kid)
    return found


def _kill_if_below(pid: int, parents: set[int]) -> None:
    """SIGKILL `pid` through a pidfd, after checking that the process the pidfd holds still has a
    parent in `parents`: a pid reused by an unrelated process in between is never signalled."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if parent_of(pid) in parents:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)


def reap_children() -> list[tuple[int, int]]:
    """Collect every child of this process that has ended: (pid, wait status) each."""
    ended: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.append((pid, status))


def kill_descendants() -> list[tuple[int, int]]:
    """SIGKILL every descendant of this process, round after round until none is left, reaping
    what ends (orphans re-parent here when this process is a child subreaper); returns what it reaped."""
    me, reaped = os.getpid(), list[tuple[int, int]]()
    for _ in range(_KILL_ROUNDS):
        reaped += reap_children()
        below = descendants(me)
        if not below:
            break
        for pid in below:
            _kill_if_below(pid, below | {me})
        time.sleep(0.001)
    return reaped
