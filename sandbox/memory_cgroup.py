"""A memory cgroup per worker (trusted side): one hard cap on the host memory of the worker and
everything it forks, where the seccomp filter caps each shared mapping but not their sum. It counts
what RLIMIT_DATA does not: MAP_SHARED memory, tmpfs files (the scratch quota, /dev/shm), page cache.

The worker's cgroup is made below the server's own cgroup, in the cgroup v2 tree when its memory
controller is available there, else in the cgroup v1 memory hierarchy. Where v2 forbids it (the
server's cgroup holds other processes, or memory is not delegated to it) the worker cgroups go below
a cgroup of this server's own, `atrex-server-<pid>-<start time>`, made empty under the nearest
ancestor that gives its children the memory controller (a sibling of the server's cgroup when that is
its parent); the server removes it at exit, a later server when it was killed. Limits: v2 `memory.max`,
`memory.swap.max` 0 and `memory.oom.group` 1 (an OOM kill takes every process of the worker); v1
`memory.limit_in_bytes` and `memory.memsw.limit_in_bytes` (the trusted side kills the rest: the
launcher refuses every reply once an OOM kill is counted). The worker joins it before anything of
it runs: the launcher prefixes its command with JOIN_SCRIPT, which writes "0" (itself) into the
`cgroup.procs` descriptor the trusted side opened and then execs the rest, so the namespaces, the
supervisor and every child start inside. The cgroup tree is never writable by the worker (root's
files, Landlock allows /sys read-only, the worker's uid is 65534 or holds no capability), and every
path is opened relative to a directory descriptor without following links.

Without a writable tree (not root, a read-only /sys/fs/cgroup, a memory controller not delegated)
workers run without one, and the plan and each worker's Isolation record say so.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sandbox.process_tree import start_ticks

STARTUP_MEMORY_BYTES = 8 << 30  # torch, a CUDA context (a few GiB of host memory), Triton's compilers, pinned staging
_NAME = re.compile(r"atrex-worker-(\d+)-(\d+)-\d+")
_SERVER_NAME = re.compile(r"atrex-server-(\d+)-(\d+)")
_REMOVE_WAIT_S = 5.0
# Runs first in the worker's command line: joins the cgroup through the inherited cgroup.procs
# descriptor argv[1], then execs argv[2:]. A refused join is printed and the worker starts outside;
# the launcher checks membership and reports no cap then.
JOIN_SCRIPT = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "try:\n"
    "    os.write(fd, b'0')\n"
    "except OSError as exc:\n"
    "    print('sandbox: the worker did not join its memory cgroup:', exc, file=sys.stderr)\n"
    "os.close(fd)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])"
)


def default_cap(host_memory_bytes: int) -> int:
    """The cap when LaunchSpec sets none: what RLIMIT_DATA lets the candidate allocate after start-up
    plus STARTUP_MEMORY_BYTES for what the worker itself maps, at most half of the machine's memory
    (one worker never takes the host's memory from the server and its other workers)."""
    cap, half = host_memory_bytes + STARTUP_MEMORY_BYTES, _mem_total() // 2
    return min(cap, half) if half else cap


def _mem_total() -> int:
    """The machine's memory (sysinfo's totalram, what /proc/meminfo calls MemTotal)."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Hierarchy:
    """Where worker cgroups are made: `base`, the server's own cgroup in a tree of `version` 1 or 2, or a
    cgroup of this server's own elsewhere in the v2 tree (`note` says where and why)."""

    version: int
    base: Path
    note: str = ""


def cgroup_mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(root within its hierarchy, mount point, fs type, super options) of each cgroup mount."""
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                found.append((fields[3], Path(fields[4].replace("\\040", " ")), tail[0], set(tail[2].split(","))))
    return found


def own_cgroup_dir(mount: Path, root: str, path: str) -> Path | None:
    """This process's cgroup directory under `mount` (None when it lies outside what is mounted there)."""
    relative = os.path.relpath(path, root)
    if relative.startswith(".."):
        return None
    return mount if relative == "." else mount / relative


def _words(path: Path) -> list[str]:
    with open(path) as fh:
        return fh.read().split()


@dataclass(frozen=True)
class V2Placement:
    """How worker cgroups are placed in a cgroup v2 tree, decided from reading it alone.

    `base` gets `memory` in its cgroup.subtree_control (`enable`) and holds the worker cgroups;
    `leaf`: the server first moves into `base/atrex-server` (it is alone in `base`); `ancestor`: `base`
    is a new cgroup of this server's own made under that ancestor, whose subtree_control lists memory."""

    base: Path
    enable: bool = False
    leaf: bool = False
    ancestor: Path | None = None
    why: str = ""  # why the server's own cgroup cannot hold them, where `ancestor` is set
    sibling: bool = False  # `ancestor` is the parent of the server's cgroup

    @property
    def note(self) -> str:
        """Where the worker cgroups go and why, when that is not below the server's own cgroup."""
        if self.ancestor is None:
            return ""
        sibling = "; a sibling of the server's cgroup" if self.sibling else ""
        return (
            f"{self.why}: worker cgroups go below {self.base}, a cgroup of this server's own made under "
            f"{self.ancestor} (the nearest cgroup above the server's that gives its children memory{sibling})"
        )


def server_cgroup_name(pid: int) -> str:
    """The name of a server's own cgroup: with its start time, it names one process ever."""
    return f"atrex-server-{pid}-{start_ticks(pid) or 0}"


def place_v2(mount: Path, own: Path, pid: int) -> V2Placement | str:
    """Where the server `pid`, in the cgroup `own` of the cgroup2 tree mounted at `mount`, makes worker
    cgroups, or why nowhere. v2 lets a cgroup other than the root give its children controllers only
    while it holds no process, so a cgroup the server shares with others cannot be used; the nearest
    ancestor that already gives its children memory can hold an empty cgroup of the server's own."""
    if not own.is_dir():
        return f"this process's cgroup {own} is not below the cgroup2 mount {mount}"
    if "memory" in _words(own / "cgroup.subtree_control"):
        return V2Placement(own)
    if "memory" in _words(own / "cgroup.controllers"):
        procs = _words(own / "cgroup.procs")
        if not (own / "cgroup.type").exists():  # the root cgroup: exempt from the no-internal-processes rule
            return V2Placement(own, enable=True)
        if procs in ([], [str(pid)]):
            return V2Placement(own, enable=True, leaf=bool(procs))
        why = f"{own} holds other processes than this server, so its children cannot get the memory controller"
    else:
        why = f"the memory controller is not delegated to {own}"
    for ancestor in (above for above in own.parents if above == mount or mount in above.parents):  # nearest first
        if "memory" in _words(ancestor / "cgroup.subtree_control"):
            base = ancestor / server_cgroup_name(pid)
            return V2Placement(base, enable=True, ancestor=ancestor, why=why, sibling=ancestor == own.parent)
    return (
        f"cgroup v2: {why}, and no cgroup above it up to {mount} gives its children the memory controller "
        "(run the server in a cgroup of its own with memory delegated, e.g. systemd Delegate=yes)"
    )


def _open_dir(parent: Path | int, name: str) -> int:
    """A descriptor of the directory `name` in `parent` (a path or an open descriptor), no link followed."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    if isinstance(parent, int):
        return os.open(name, flags, dir_fd=parent)
    parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return os.open(name, flags, dir_fd=parent_fd)
    finally:
        os.close(parent_fd)


def _mkdir_open(parent: Path, name: str) -> int:
    """Make the directory `name` in `parent` (or find it made) and open it, no link followed."""
    parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            os.mkdir(name, 0o755, dir_fd=parent_fd)
        except FileExistsError:
            pass
        return _open_dir(parent_fd, name)
    finally:
        os.close(parent_fd)


def apply_v2(place: V2Placement) -> Hierarchy | str:
    """Carry out `place`: make the server's own cgroup or leaf, enable memory for the worker cgroups."""
    if place.ancestor is not None:
        try:
            base_fd = _mkdir_open(place.ancestor, place.base.name)
        except OSError as exc:
            return (
                f"cgroup v2: {place.why}, and no cgroup of this server's own can be made in {place.ancestor}: "
                f"{exc.strerror}"
            )
        try:
            _write(base_fd, "cgroup.subtree_control", "+memory")
        except OSError as exc:
            os.close(base_fd)
            remove_server_cgroup(place.ancestor, place.base.name)
            return (
                f"cgroup v2: {place.why}, and memory cannot be enabled for the children of {place.base}, "
                f"a cgroup of this server's own under {place.ancestor}: {exc.strerror}"
            )
        os.close(base_fd)
        atexit.register(_remove_own_server_cgroup, os.getpid(), place.ancestor, place.base.name)
        return Hierarchy(2, place.base, place.note)
    try:
        if place.leaf:
            leaf_fd = _mkdir_open(place.base, "atrex-server")
            try:
                _write(leaf_fd, "cgroup.procs", "0")
            finally:
                os.close(leaf_fd)
        if place.enable:
            _write(place.base, "cgroup.subtree_control", "+memory")
    except OSError as exc:
        return f"cgroup v2: memory cannot be enabled for the children of {place.base}: {exc.strerror}"
    return Hierarchy(2, place.base)


def _detect() -> Hierarchy | str:
    """The hierarchy worker cgroups go in here, or why there is none."""
    try:
        mounts = cgroup_mounts()
        with open("/proc/self/cgroup") as fh:
            memberships = [line.rstrip("\n").split(":", 2) for line in fh if line.count(":") >= 2]
    except OSError as exc:
        return f"the cgroup mounts cannot be read: {exc.strerror}"
    v2_path = next((path for hid, ctrls, path in memberships if hid == "0" and ctrls == ""), None)
    v1_path = next((path for _hid, ctrls, path in memberships if "memory" in ctrls.split(",")), None)
    reasons = []
    for root, mount, kind, options in mounts:
        found: Hierarchy | str
        try:
            if kind == "cgroup2" and v2_path is not None:
                own = own_cgroup_dir(mount, root, v2_path)
                if own is None:
                    found = f"this process's cgroup {v2_path} is not below the cgroup2 mount {mount}"
                else:
                    place = place_v2(mount, own, os.getpid())
                    found = place if isinstance(place, str) else apply_v2(place)
            elif kind == "cgroup" and "memory" in options and v1_path is not None:
                base = own_cgroup_dir(mount, root, v1_path)
                found = Hierarchy(1, base) if base is not None and base.is_dir() else f"no v1 memory cgroup at {mount}"
            else:
                continue
        except OSError as exc:
            found = f"the cgroup tree at {mount} cannot be read: {exc.strerror}"
        if isinstance(found, Hierarchy):
            return found
        reasons.append(found)
    return "; ".join(reasons) or "no memory cgroup controller is mounted"


@cache
def hierarchy() -> Hierarchy | str:
    """Where this server makes worker cgroups, or why it makes none (checked once: a cgroup is made,
    capped, joined by a process started as a worker is, and removed). Then the worker cgroups of
    servers that ended without removing them go."""
    found = _detect()
    if isinstance(found, str):
        return found
    try:
        probe = MemoryCgroup.create(found, 64 << 20)
    except OSError as exc:
        return _give_up(found, f"no worker cgroup can be made in {found.base}: {exc.strerror}")
    refused = _join_refused(probe)
    probe.remove()
    if refused:
        return _give_up(found, f"a process of this server cannot join a worker cgroup in {found.base}: {refused}")
    sweep_stale(found)
    return found


def _give_up(found: Hierarchy, why: str) -> str:
    """Remove the server's own cgroup, where one was made for `found`, and say why there is no cap."""
    if _SERVER_NAME.fullmatch(found.base.name):
        remove_server_cgroup(found.base.parent, found.base.name)
    return f"cgroup v{found.version}: {why}" + (f" (placed there because {found.note})" if found.note else "")


def _join_refused(group: MemoryCgroup) -> str:
    """What refused a process of this server joining `group` the way a worker does ("" when it joined):
    moving a process needs write access to the cgroup.procs of the lowest cgroup above both ends."""
    try:
        done = subprocess.run(
            [*group.join_prefix(), "true"], pass_fds=(group.procs_fd,), capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return done.stderr.strip() if done.returncode or "did not join" in done.stderr else ""


def _write(directory: Path | int, name: str, value: str) -> None:
    """Write `value` to the control file `name` of `directory` (a path or an open descriptor), no link followed."""
    dir_fd = directory if isinstance(directory, int) else os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
    finally:
        if not isinstance(directory, int):
            os.close(dir_fd)


_counter = itertools.count()
_counter_lock = threading.Lock()


class MemoryCgroup:
    """One worker's cgroup: made capped, joined by the worker through `procs_fd`, removed when it ends."""

    def __init__(self, hierarchy: Hierarchy, name: str, dir_fd: int, limit: int):
        self.hierarchy, self.name, self.limit = hierarchy, name, limit
        self.path = hierarchy.base / name
        self._dir_fd = dir_fd
        self.procs_fd = -1  # cgroup.procs, open for writing: what the worker's first process writes itself into

    @classmethod
    def create(cls, hierarchy: Hierarchy, limit: int) -> MemoryCgroup:
        """A new cgroup capped at `limit` bytes (OSError: it could not be made or capped; nothing is left)."""
        with _counter_lock:
            number = next(_counter)
        name = f"atrex-worker-{os.getpid()}-{start_ticks(os.getpid()) or 0}-{number}"
        base_fd = os.open(hierarchy.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.mkdir(name, 0o755, dir_fd=base_fd)
            dir_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=base_fd)
        finally:
            os.close(base_fd)
        group = cls(hierarchy, name, dir_fd, limit)
        try:
            group._cap()
            group.procs_fd = os.open("cgroup.procs", os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            group.remove()
            raise
        return group

    def _cap(self) -> None:
        if self.hierarchy.version == 2:
            _write(self._dir_fd, "memory.max", str(self.limit))
            _write(self._dir_fd, "memory.oom.group", "1")
            self._write_if_present("memory.swap.max", "0")  # absent without swap accounting
        else:
            _write(self._dir_fd, "memory.limit_in_bytes", str(self.limit))
            self._write_if_present("memory.memsw.limit_in_bytes", str(self.limit))  # absent without swap accounting

    def _write_if_present(self, name: str, value: str) -> None:
        try:
            _write(self._dir_fd, name, value)
        except FileNotFoundError:
            pass

    def _value(self, name: str) -> str:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._dir_fd)
        try:
            return os.read(fd, 1 << 16).decode()
        finally:
            os.close(fd)

    def join_prefix(self) -> list[str]:
        """The command placed before the worker's: it joins this cgroup, then execs the worker's."""
        return [sys.executable, "-I", "-S", "-c", JOIN_SCRIPT, str(self.procs_fd)]

    def close_join(self) -> None:
        """Close the trusted side's copy of cgroup.procs once the worker's first process has it."""
        if self.procs_fd >= 0:
            os.close(self.procs_fd)
            self.procs_fd = -1

    def pids(self) -> set[int]:
        """The processes in the cgroup now (as this server's PID namespace numbers them)."""
        try:
            return {int(p) for p in self._value("cgroup.procs").split()}
        except OSError:
            return set()

    def oom_kills(self) -> int:
        """Processes the kernel killed for this cgroup's limit so far."""
        name = "memory.events" if self.hierarchy.version == 2 else "memory.oom_control"
        try:
            for line in self._value(name).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def peak_bytes(self) -> int | None:
        """The most memory the cgroup held at once (None where the kernel does not keep it)."""
        try:
            return int(self._value("memory.peak" if self.hierarchy.version == 2 else "memory.max_usage_in_bytes"))
        except (OSError, ValueError):
            return None

    def reason(self) -> str:
        """Why the worker was stopped, naming the limit and what counts against it."""
        return (
            f"the worker was killed for memory: it and the processes it started held more than the memory cap of "
            f"{self.limit / 2**20:.0f} MiB (LaunchSpec.memory_cap_bytes; private and shared memory, tmpfs files such "
            "as the scratch directory's tmp/ and /dev/shm, and page cache all count); hold less host memory at once"
        )

    def remove(self) -> bool:
        """Kill what is left in the cgroup and remove it; False if it could not be removed in time
        (a later server's sweep removes it)."""
        self.close_join()
        if self._dir_fd < 0:
            return True
        deadline = time.monotonic() + _REMOVE_WAIT_S
        removed = False
        while True:
            left = self.pids()
            if not left:
                try:
                    base_fd = os.open(self.hierarchy.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                    try:
                        os.rmdir(self.name, dir_fd=base_fd)
                    finally:
                        os.close(base_fd)
                    removed = True
                    break
                except FileNotFoundError:
                    removed = True
                    break
                except OSError:
                    pass  # tasks still exiting
            else:
                self._kill(left)
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        os.close(self._dir_fd)
        self._dir_fd = -1
        return removed

    def _kill(self, pids: set[int]) -> None:
        """SIGKILL each process through a pidfd, once it is seen in the cgroup after the pidfd was
        opened: a pid reused by a process elsewhere is never signalled."""
        if self.hierarchy.version == 2:
            try:
                _write(self._dir_fd, "cgroup.kill", "1")
                return
            except OSError:
                pass  # cgroup.kill is Linux 5.14+
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if pid in self.pids():
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                pass
            finally:
                os.close(fd)


def sweep_stale(found: Hierarchy) -> list[str]:
    """Remove the worker cgroups of servers no longer running (killed before they removed them) and,
    where `found.base` is a server's own cgroup, the server cgroups beside it of servers no longer
    running with the worker cgroups in them; the names removed (a server cgroup's workers as
    `server/worker`)."""
    removed = [name for name in _stale(found.base, _NAME) if _remove(found.base, name, found.version)]
    if _SERVER_NAME.fullmatch(found.base.name):
        ancestor = found.base.parent
        for name in _stale(ancestor, _SERVER_NAME):
            inside = [f"{name}/{worker}" for worker in _worker_names(ancestor / name)]
            if remove_server_cgroup(ancestor, name):
                removed += [*inside, name]
    return removed


def _stale(directory: Path, pattern: re.Pattern[str]) -> list[str]:
    """The names in `directory` matching `pattern` whose process (pid, start time) is not running."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return [
        name
        for name in names
        if (match := pattern.fullmatch(name)) is not None and start_ticks(int(match[1])) != int(match[2])
    ]


def _worker_names(directory: Path) -> list[str]:
    try:
        return [name for name in os.listdir(directory) if _NAME.fullmatch(name)]
    except OSError:
        return []


def _remove(parent: Path, name: str, version: int = 2) -> bool:
    """Kill what is left in the cgroup `parent/name` and remove it (False: it could not be, in time)."""
    try:
        dir_fd = _open_dir(parent, name)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return MemoryCgroup(Hierarchy(version, parent), name, dir_fd, 0).remove()


def _remove_own_server_cgroup(pid: int, ancestor: Path, name: str) -> None:
    """At exit, remove the server cgroup this process made (not from a forked copy of it)."""
    if os.getpid() == pid:
        remove_server_cgroup(ancestor, name)


def remove_server_cgroup(ancestor: Path, name: str) -> bool:
    """Remove the server cgroup `ancestor/name`: every worker cgroup in it, then itself."""
    base = ancestor / name
    workers_gone = all([_remove(base, worker) for worker in _worker_names(base)])
    return workers_gone and _remove(ancestor, name)
