"""The scratch size limit where no tmpfs can hold it (no mount namespace: a non-root server). A
thread of the trusted server measures what the worker's files take, every POLL_S and once more
before each reply is accepted, and kills the worker as soon as it passes LaunchSpec.scratch_bytes.
It lives in the server, outside the worker's processes and Landlock domain: the candidate can
neither signal it (Landlock signal scope) nor trace it (seccomp).

Bound: what the worker holds on disk at the kill is at most the limit plus what it writes in one
polling interval (and one measurement); RLIMIT_FSIZE <= the limit keeps any single file below it.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from sandbox import process_tree

POLL_S = 0.025
MAX_ENTRIES = 100_000  # directory entries and descriptors one measurement visits: its cost stays bounded


class OverLimit(Exception):
    """The worker's files passed a limit; the message says which."""


def _held_bytes(st: os.stat_result) -> int:
    return st.st_blocks * 512


def usage(scratch: Path, pids: Iterable[int]) -> tuple[int, set[int]]:
    """Bytes the worker's files take: every entry under `scratch` (links never followed, each inode
    once), plus files on the scratch filesystem that are unlinked but still open in one of `pids`
    (space no directory walk sees); and the pids whose descriptors could not be read (not dumpable,
    or exiting). OverLimit past MAX_ENTRIES."""
    root = os.stat(scratch, follow_symlinks=False)
    seen: set[tuple[int, int]] = {(root.st_dev, root.st_ino)}
    total, visited, todo = _held_bytes(root), 0, [str(scratch)]
    while todo:
        try:
            entries = os.scandir(todo.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                visited += 1
                if visited > MAX_ENTRIES:
                    raise OverLimit(f"its scratch directory holds more than {MAX_ENTRIES} entries")
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += _held_bytes(st)
                if stat.S_ISDIR(st.st_mode):
                    todo.append(entry.path)
    hidden: set[int] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:
            continue  # ended meanwhile
        except PermissionError:
            if not process_tree.ending(pid):
                hidden.add(pid)
            continue
        for fd in fds:
            visited += 1
            if visited > MAX_ENTRIES:
                raise OverLimit(f"its processes hold more than {MAX_ENTRIES} entries and descriptors")
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if st.st_dev == root.st_dev and st.st_nlink == 0 and stat.S_ISREG(st.st_mode) and key not in seen:
                seen.add(key)
                total += _held_bytes(st)
    return total, hidden


class ScratchWatch:
    """Polls `usage` on a daemon thread while `running()`; past `limit` it records why and calls `stop` once.
    `pids` gives the worker's processes now (their unlinked open files count too)."""

    def __init__(
        self,
        scratch: Path,
        limit: int,
        pids: Callable[[], Iterable[int]],
        stop: Callable[[], None],
        running: Callable[[], bool],
    ):
        self.scratch, self.limit, self._pids, self._stop, self._running = scratch, limit, pids, stop, running
        self.reason = ""  # set once the worker was stopped for passing the limit
        self._hidden: set[int] = set()  # processes whose descriptors the last measurement could not read
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scratch-watch", daemon=True)

    def start(self) -> ScratchWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._done.wait(POLL_S) and self._running() and not self.check():
            pass

    def check(self) -> str:
        """Measure now: the reason the worker was stopped ("" while within the limit)."""
        with self._lock:
            if self.reason or self._done.is_set():
                return self.reason
            try:
                held, hidden = usage(self.scratch, self._pids())
                still_hidden, self._hidden = hidden & self._hidden, hidden  # twice in a row: not just exiting
                if still_hidden:
                    problem = f"process {min(still_hidden)} hid its open files (not dumpable)"
                elif held <= self.limit:
                    return ""
                else:
                    problem = f"its files took {held / 2**20:.1f} MiB"
            except OverLimit as exc:
                problem = str(exc)
            except OSError:
                return ""  # the scratch directory is gone: the worker is being torn down
            self.reason = (
                f"the worker was killed by the scratch watchdog: {problem}, over the scratch limit of "
                f"{self.limit / 2**20:.0f} MiB (LaunchSpec.scratch_bytes)"
            )
            self._stop()
            return self.reason

    def close(self) -> None:
        self._done.set()
