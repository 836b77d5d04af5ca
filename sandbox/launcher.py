"""Starting, talking to, and killing a sandbox worker (trusted side).

The isolation policy in one place (sandbox/README.md says why, and what remains possible):
* its own session and process group (killed whole with SIGKILL); without a PID namespace, a
  supervisor (sandbox.supervisor, a child subreaper) as its parent, which kills every descendant
  when it ends, and the server's scratch watchdog (sandbox.scratch_watch) for the scratch limit;
* when the tools and privileges exist, its own PID namespace, so a child that calls setsid() still dies with it,
  holding at most WORKER_TASKS tasks (its pid_max), its own network namespace (no interface
  but a loopback, down unless a profiler wraps the worker), and its own mount namespace with a
  private /proc (no other process visible), an empty mode-000 tmpfs over every protected
  directory (a layer that holds without Landlock), the scratch directory read-only but for its
  tmp/ and .cache/, which share one size-limited tmpfs, and a small /dev/shm;
* where the cgroup tree is writable, a memory cgroup of its own capped at LaunchSpec.memory_cap_bytes
  (sandbox.memory_cgroup), joined before anything of the worker runs;
* uid/gid 65534 with no supplementary groups when running as root and the interpreter is
  reachable by that uid (it owns only the scratch directory's tmp/ and .cache/); otherwise the
  worker drops every capability itself;
* a minimal environment, cwd = a scratch directory holding only the candidate and the
  visible problem files, TMPDIR and every compiler cache inside it;
* rlimits, a seccomp filter (sandbox.syscall_filter: no file metadata changes, no sockets,
  no big shared memory) and Landlock applied by the worker itself before the candidate is
  imported (sandbox.isolation): read/execute only for the interpreter, its import paths and system
  libraries; read/write only for the scratch directory; the few device files a GPU needs;
  no path under a protected root (problem sets with hidden files, the package's data,
  the state directory), no TCP, no signals leaving the sandbox.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import select
import shutil
import signal
import site
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from sandbox import landlock, memory_cgroup, process_tree, protocol, syscall_filter
from sandbox import scratch as scratch_files
from sandbox.messages import ExitRequest, InitRequest, Request
from sandbox.scratch_watch import POLL_S, ScratchWatch

SANDBOX_UID = SANDBOX_GID = 65534
_PASS_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "CUDA_PATH",
    "LD_LIBRARY_PATH",
    "TRITON_PTXAS_PATH",
    "TRITON_CUOBJDUMP_PATH",
    "TRITON_NVDISASM_PATH",
    "TRITON_LIBCUDA_PATH",
    "OMP_NUM_THREADS",
)
_SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/host.conf",
    "/etc/hosts",
)
_DEVICES = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)
_PROC_FILES = (
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/filesystems",
    "/proc/sys/kernel",
    "/proc/sys/vm/overcommit_memory",
    "/proc/driver/nvidia",
)
WORKER_TASKS = 300  # tasks (threads included) a worker's PID namespace holds: its pid_max is one more
SHM_BYTES = 64 << 20  # the worker's /dev/shm
_MAX_OMP_THREADS = 64  # torch's CPU pool, unless the operator sets OMP_NUM_THREADS: well inside WORKER_TASKS
_BOOTSTRAP = (
    "import json, sys; c = json.loads(sys.argv[1]); sys.path[:0] = c['sys_path']; "
    "from sandbox.worker import main; main(c)"
)
SUPERVISOR_BOOTSTRAP = (
    "import json, sys; c = json.loads(sys.argv[1]); sys.path[:0] = c['sys_path']; "
    "from sandbox.supervisor import main; main(c)"
)


class WorkerDied(Exception):
    """The worker process ended (crash, kill, OOM) before answering; `reason` says why when the
    trusted side killed it for a limit (the scratch watchdog)."""

    def __init__(self, returncode: int | None, log_tail: str, reason: str = "", out_of_memory: bool = False):
        super().__init__(reason or f"worker exited with {returncode}")
        self.returncode, self.log_tail, self.reason = returncode, log_tail, reason
        self.out_of_memory = out_of_memory  # the kernel killed a process of it for its memory cap


class WorkerTimeout(Exception):
    """The worker did not answer in time; it has been killed."""


class Cancelled(Exception):
    """The caller asked to stop; the worker has been killed."""


READ_GRACE_S = 5.0  # a reply seen arriving before its deadline gets this long to finish arriving once read


class _ReplyWatch:
    """Notes when a reply channel first has data, on a thread, while the judge does its own work
    between sending a request and reading its reply (Worker.send with watch): the worker's time
    ends when its reply arrives, not when the judge comes back to read it. Only selects, never
    reads: the frames are left for PendingReply.wait. The note is as late as the thread takes to
    get the interpreter after the select returns (a few ms while the judge runs Python)."""

    def __init__(self, fd: int):
        self._fd = fd
        self._wake_r, self._wake_w = os.pipe()
        self.ready_at: float | None = None
        self._thread = threading.Thread(target=self._run, name="atrex-reply-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            ready, _, _ = select.select([self._fd, self._wake_r], [], [])
        except (OSError, ValueError):
            return
        if self._fd in ready:
            self.ready_at = time.perf_counter()

    def stop(self) -> float | None:
        """End the watch; the time the channel first had data, if it had any by now."""
        os.write(self._wake_w, b"x")
        self._thread.join()
        os.close(self._wake_r)
        os.close(self._wake_w)
        return self.ready_at


class PendingReply:
    """A request sent to a worker whose reply is not read yet (Worker.send). The timeout counts
    from the send: the worker gets `timeout_s` of wall time whatever the judge does before it
    waits, and a reply that arrived after the deadline is a timeout however soon it is read,
    while one that arrived before it is read however late (the judge's own time is neither
    added to the worker's budget nor taken from it). Where the send was watched, `arrived_at`
    is when the reply came even if the judge was busy then; otherwise it is when it was read."""

    def __init__(self, worker: Worker, command: str, timeout_s: float):
        self.worker, self.command, self.timeout_s = worker, command, timeout_s
        self.nonce = secrets.token_hex(8)
        self.sent_at = time.perf_counter()
        self.deadline = self.sent_at + timeout_s
        self.arrived_at: float | None = None
        self.send_error: BaseException | None = None  # the send failed: wait raises as for a dead worker
        self._waited = False

    def wait(self, poll: Callable[[], None] | None = None) -> dict[str, Any]:
        """The reply (the worker's claims, shaped as `sandbox.messages.REPLIES[command]` if it is
        honest). Past the deadline → the worker is killed and WorkerTimeout raised; its death →
        WorkerDied; poll() raising Cancelled → killed too. Once only."""
        if self._waited:
            raise RuntimeError(f"the reply to {self.command} was already awaited")
        self._waited = True
        return self.worker._wait(self, poll)

    def abandon(self) -> None:
        """Give up on the reply: the worker is killed (its state is unknown with a reply unread)."""
        if not self._waited:
            self._waited = True
            self.worker.kill()

    @property
    def seconds(self) -> float:
        """The worker's wall on this request: from the send to its reply's arrival (to now while
        none has arrived)."""
        return (self.arrived_at if self.arrived_at is not None else time.perf_counter()) - self.sent_at


@dataclass
class LaunchSpec:
    """What a worker needs: its scratch directory and the limits it runs under."""

    scratch: Path
    device: str  # "cuda" or "cpu"
    protected: list[Path]  # nothing under these may be readable by the worker
    env: dict[str, str] = field(default_factory=dict)  # DSL-specific additions (e.g. TRITON_INTERPRET)
    host_memory_bytes: int = 32 << 30  # added to what the worker has mapped after start-up
    # A command the worker's interpreter runs under (e.g. ncu and its options): inside the
    # namespaces and after the uid switch, so it is confined with the worker it wraps.
    wrapper: list[str] = field(default_factory=list)
    read_roots: list[Path] = field(
        default_factory=list
    )  # extra read/execute roots for the worker (a wrapper's injected libraries)
    # Openings a wrapper's injected library needs to talk to its front end (ncu: TCP from port 49152,
    # abstract unix sockets); both stay closed unless the wrapper asks for them.
    tcp_ports: list[int] = field(default_factory=list)
    abstract_unix: bool = False
    extra_rules: dict[str, int] = field(
        default_factory=dict
    )  # more Landlock paths (path → rights), never a protected root
    file_size_bytes: int = 16 << 30
    # What the worker may write: tmp/ and .cache/ of the scratch directory share a tmpfs of this
    # size in its mount namespace; without one (a non-root server) the scratch watchdog kills the
    # worker past it, and RLIMIT_FSIZE is held to it. Not for a wrapped worker: a profiler's log and
    # the compiler cache it reads back must reach the trusted side.
    scratch_bytes: int = 1 << 30
    # Hard cap on the host memory of the worker and everything it forks, one memory cgroup (where the
    # server may make one): private and shared memory, tmpfs files (scratch tmp/, /dev/shm) and page
    # cache alike; past it the kernel kills the worker. None: host_memory_bytes plus what start-up maps
    # (torch, a CUDA context, Triton), at most half of the machine's memory (memory_cgroup.default_cap).
    memory_cap_bytes: int | None = None
    output_fd: int | None = None  # the output arena (sandbox.handoff) every worker of this spec inherits
    start_timeout_s: float = 180.0
    # Off only to diagnose a machine where Landlock breaks the DSL toolchain: ATREX_SANDBOX_LANDLOCK=0.
    landlock: bool = field(default_factory=lambda: os.environ.get("ATREX_SANDBOX_LANDLOCK", "1") != "0")
    # What a worker spawned ahead (evaluate.standby) sets up before `init`, while it waits
    # (sandbox.worker.WARM_STEPS): "triton_driver" (Triton's CUDA driver and the C helper it builds),
    # "profiler" (an empty profiler session: CUPTI's set-up, which creates the CUDA context then).
    warm: tuple[str, ...] = ()


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


def _is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _reachable_by_others(path: Path) -> bool:
    """Every directory on the way searchable, and the path itself readable, by an unrelated uid."""
    try:
        for part in [*reversed(path.parents), path]:
            mode = part.stat().st_mode
            if not mode & stat.S_IXOTH or (part == path and not mode & stat.S_IROTH):
                return False
    except OSError:
        return False
    return True


def _site_dirs() -> set[Path]:
    dirs = {_real(p) for p in site.getsitepackages() if os.path.isdir(p)}
    for key in ("purelib", "platlib"):
        dirs.add(_real(sysconfig.get_paths()[key]))
    return dirs


def import_paths() -> list[str]:
    """The interpreter's import path as the worker gets it: this process's, minus the cwd, plus
    the directory this `sandbox` package imports from (the worker runs `python -I`, so
    PYTHONPATH does not reach it, and a checkout that is not installed is found only through
    the cwd). In a checkout Landlock still allows only the sandbox package under that
    directory (`landlock_rules`)."""
    paths: list[str] = []
    for entry in [*sys.path, str(Path(__file__).resolve().parent.parent)]:
        if entry and os.path.isdir(entry) and _real(entry) not in [_real(p) for p in paths]:
            paths.append(str(_real(entry)))
    return paths


def _add_tree(rules: dict[str, int], path: Path, rights: int, protected: list[Path]) -> None:
    """Allow `path` unless a protected root is inside it; then allow its children one by one,
    skipping protected roots and dot-entries (a .git holds every file ever committed)."""
    if not path.exists() or any(_is_within(path, p) for p in protected):
        return
    if not any(_is_within(p, path) for p in protected):
        rules[str(path)] = rights
        return
    for child in sorted(path.iterdir()):
        if not child.name.startswith("."):
            _add_tree(rules, _real(child), rights, protected)


def landlock_rules(spec: LaunchSpec, sys_path: list[str]) -> dict[str, int]:
    protected = [_real(p) for p in spec.protected]
    sandbox_pkg = _real(Path(__file__).parent)
    checkout = sandbox_pkg.parent not in _site_dirs()
    if checkout:  # a source checkout: only the sandbox package, never its neighbours
        protected.append(sandbox_pkg.parent)
    rules: dict[str, int] = {}
    for d in _SYSTEM_DIRS:
        _add_tree(rules, _real(d), landlock.READ_EXEC, protected)
    paths = sysconfig.get_paths()
    roots = [
        *sys_path,
        paths["stdlib"],
        paths["platstdlib"],
        paths["include"],
        paths["platinclude"],
        sysconfig.get_config_var("LIBDIR") or "",
        os.path.dirname(sys.executable),
    ]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        roots.append(os.environ.get(var, ""))
    roots += os.environ.get("LD_LIBRARY_PATH", "").split(":")
    roots += [str(p) for p in spec.read_roots]
    if spec.wrapper:  # the wrapper injects its own libraries into the worker: its install tree
        tool = shutil.which(spec.wrapper[0])
        if tool:
            roots += [str(_real(tool).parent), str(_real(tool).parent.parent)]
    for root in roots:
        if root:
            _add_tree(rules, _real(root), landlock.READ_EXEC, protected)
    if checkout:
        rules[str(sandbox_pkg)] = landlock.READ_EXEC
    for f in (*_ETC_FILES, *_PROC_FILES, "/sys"):
        if os.path.exists(f):
            rules[f] = landlock.READ
    for dev in _DEVICES:
        if os.path.exists(dev):
            rules[dev] = landlock.DEVICE
    if os.path.isdir("/dev"):
        for name in os.listdir("/dev"):
            if name.startswith("nvidia"):
                rules[f"/dev/{name}"] = landlock.DEVICE if not os.path.isdir(f"/dev/{name}") else landlock.READ
    for path, rights in spec.extra_rules.items():
        _add_tree(rules, _real(path), rights, protected)
    rules[str(_real(spec.scratch))] = landlock.READ_WRITE
    return rules


# Runs as root inside the new mount namespace, before the uid switch: an empty, read-only,
# mode-000 tmpfs over every protected directory, then exec of the rest of the command line.
HIDE_SCRIPT = (
    'while [ "$1" != "--" ]; do mount -t tmpfs -o ro,size=4k,mode=000 atrex-hidden "$1" || exit 97; '
    'shift; done; shift; exec "$@"'
)


# Runs as root inside the new namespaces, after HIDE_SCRIPT: caps the PID namespace's tasks,
# gives the worker a small /dev/shm and, unless "$2" is "-", makes the scratch directory "$2"
# read-only but for "$2/tmp" and "$2/.cache", one tmpfs of "$3" bytes owned by uid "$4", and
# enters it again (the cwd inherited from the launcher is the directory below the new mounts).
_PRELUDE_SCRIPT = (
    'echo "$1" > /proc/sys/kernel/pid_max 2>/dev/null; '
    'if [ "$2" != - ]; then mount --bind "$2" "$2" && mount -o remount,bind,ro "$2" && '
    'mount -t tmpfs -o "size=$3,mode=0700,uid=$4,gid=$4" atrex-scratch "$2/tmp" && '
    'mkdir -m 0700 "$2/tmp/.cache" && chown "$4:$4" "$2/tmp/.cache" && '
    'mount --bind "$2/tmp/.cache" "$2/.cache" && cd "$2" || exit 96; fi; '
    'mount -t tmpfs -o "size=$5,mode=1777" atrex-shm /dev/shm 2>/dev/null; shift 5; exec "$@"'
)
# Runs as root inside a new network namespace when a profiler wraps the worker: its front end
# and its injected library talk over loopback, which a new namespace has down.
_LOOPBACK_UP = (
    "import fcntl, os, socket, struct, sys\n"
    "try:\n"
    "    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:\n"
    "        fcntl.ioctl(s, 0x8914, struct.pack('16sH22x', b'lo', 0x1 | 0x8 | 0x40))\n"
    "except OSError as exc:\n"
    "    print('loopback not brought up:', exc, file=sys.stderr)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


@dataclass(frozen=True)
class Namespaces:
    """What `unshare` gives a worker here (none when not root or refused)."""

    prefix: tuple[str, ...] = ()
    mount: bool = False  # mount namespace: private /proc, hidden roots
    network: bool = False  # network namespace: no way out
    quota: bool = False  # the prelude's read-only scratch and tmpfs work here (mount namespace)


@cache
def _namespaces() -> Namespaces:
    """PID namespace; where allowed a network namespace, and a mount namespace with its own
    /proc, the protected roots covered and the scratch directory capped."""
    tool, sh = shutil.which("unshare"), shutil.which("sh")
    if os.geteuid() != 0 or tool is None:
        return Namespaces()
    base: tuple[str, ...] = (tool, "--pid", "--fork", "--kill-child")
    network = subprocess.run([*base, "--net", "true"], capture_output=True, timeout=20).returncode == 0
    if network:
        base = (*base, "--net")
    with tempfile.TemporaryDirectory() as probe_dir:
        full = (*base, "--mount-proc")
        probe = subprocess.run(
            [*full, sh or "sh", "-c", HIDE_SCRIPT, "sh", probe_dir, "--", "true"], capture_output=True, timeout=20
        )
        if sh and probe.returncode == 0:
            scratch = Path(probe_dir) / "scratch"
            for sub in ("tmp", ".cache"):
                (scratch / sub).mkdir(parents=True)
            quota = subprocess.run(
                [
                    *full,
                    sh,
                    "-c",
                    _PRELUDE_SCRIPT,
                    "sh",
                    str(WORKER_TASKS + 1),
                    str(scratch),
                    str(1 << 20),
                    "0",
                    str(1 << 20),
                    "true",
                ],
                capture_output=True,
                timeout=20,
            )
            return Namespaces(full, True, network, quota.returncode == 0)
    probe = subprocess.run([*base, "true"], capture_output=True, timeout=20)
    return Namespaces(base, False, network) if probe.returncode == 0 else Namespaces()


def outermost(dirs: list[Path]) -> list[Path]:
    """The existing directories among `dirs` (symlinks resolved, duplicates merged) that lie inside
    no other: a tmpfs over a directory removes every mount point below it, so only these are covered."""
    real = sorted({_real(d) for d in dirs if _real(d).is_dir()}, key=lambda d: len(d.parts))
    kept: list[Path] = []
    for d in real:
        if not any(_is_within(d, k) for k in kept):
            kept.append(d)
    return sorted(kept)


def hidden_dirs(spec: LaunchSpec) -> list[str]:
    """Directories a mount namespace covers: the protected roots and a checkout's .git, outermost only."""
    dirs = list(spec.protected)
    checkout = _real(Path(__file__).parent).parent
    if (checkout / ".git").is_dir():
        dirs.append(checkout / ".git")
    return [str(d) for d in outermost(dirs)]


def isolation_plan(sys_path: list[str]) -> dict[str, Any]:
    """How the next worker will be started here: uid switch, namespaces, and why not."""
    notes: list[str] = []
    drop_uid = False
    if os.geteuid() != 0:
        notes.append("not running as root: the worker keeps this uid (Landlock and rlimits still apply)")
    else:
        blocked = [p for p in [sys.executable, *sys_path] if not _reachable_by_others(_real(p))]
        if blocked:
            notes.append(
                f"uid 65534 cannot reach {blocked[0]} (e.g. an interpreter under /root): the worker stays uid 0 "
                "with every capability dropped"
            )
        else:
            drop_uid = True
    spaces = _namespaces()
    prefix, hides, network, quota = list(spaces.prefix), spaces.mount, spaces.network, spaces.quota
    setpriv = shutil.which("setpriv")
    if prefix and drop_uid and setpriv is None:
        prefix, hides, network, quota = [], False, False, False
        notes.append("setpriv missing: no namespaces (the uid switch needs it after unshare)")
    elif not prefix:
        notes.append(
            "no PID namespace (needs root and util-linux unshare): a supervisor, the worker's child subreaper, kills "
            "every process below it (setsid() and double-forked children too) when the worker ends; other processes "
            "stay visible in /proc"
        )
    elif not hides:
        notes.append("no mount namespace: protected directories are hidden by Landlock alone")
    if not network:
        notes.append("no network namespace: the seccomp filter alone keeps the worker off the network")
    watchdog = (
        f"the scratch limit is a watchdog of the server (every {POLL_S * 1000:.0f} ms and before each reply), "
        "which kills the worker past it: what it writes in one interval can pass the limit, no file past "
        "it (RLIMIT_FSIZE)"
    )
    if not hides:
        notes.append(
            f"no task cap or scratch tmpfs (they need the mount namespace): at most RLIMIT_NPROC tasks for a "
            f"non-root uid; {watchdog}"
        )
    elif not quota:
        notes.append(f"no scratch tmpfs (a read-only bind mount or tmpfs was refused here): {watchdog}")
    seccomp_missing = syscall_filter.available()
    if seccomp_missing:
        notes.append(f"no seccomp filter: {seccomp_missing}")
    cgroups = memory_cgroup.hierarchy()
    if isinstance(cgroups, str):
        notes.append(
            f"no memory cgroup per worker ({cgroups}): the sum of its shared mappings, tmpfs files and page "
            "cache is not capped"
        )
    return {
        "drop_uid": drop_uid,
        "pid_namespace": bool(prefix),
        "mount_namespace": hides,
        "prefix": prefix,
        "setpriv": setpriv,
        "notes": notes,
        "net_namespace": network,
        "task_limit": WORKER_TASKS if hides else None,  # per-namespace pid_max; the worker reports if it held
        "scratch_quota": quota,  # tmp/ and .cache/ on a capped tmpfs (not for a profiler-wrapped worker)
        "scratch_watchdog": not quota,  # else the server polls the scratch size and kills past it (not wrapped either)
        "supervisor": not prefix,  # a child subreaper parents the worker where no PID namespace holds it
        "seccomp": {"available": not seccomp_missing, "error": seccomp_missing},
        # the cgroup version (1 or 2) each worker's memory cgroup is made in; None: no memory cap
        "memory_cgroup": None if isinstance(cgroups, str) else cgroups.version,
        "memory_cgroup_base": None if isinstance(cgroups, str) else str(cgroups.base),  # the worker cgroups' parent
        # why that parent is not the server's own cgroup (v2: a cgroup of the server's own beside it), else ""
        "memory_cgroup_placement": "" if isinstance(cgroups, str) else cgroups.note,
    }


def hand_over(scratch: Path) -> None:
    """Give a uid-65534 worker what it may write, tmp/ and .cache/, never through a link; the
    directory itself stays root's, open to the worker's group for reading only, so the files the
    judge put there (the candidate, input.py, which a restarted worker runs) cannot be replaced."""
    os.chown(scratch, 0, SANDBOX_GID)
    os.chmod(scratch, 0o750)
    for sub in ("tmp", ".cache"):
        scratch_files.chown_tree(scratch / sub, SANDBOX_UID, SANDBOX_GID)


def _tasks_of(uid: int) -> int:
    """Tasks (threads included) of `uid` now: what RLIMIT_NPROC counts for it."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                count += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return count


class _OutputTail:
    """Drains the worker's stdout/stderr on a thread, keeping only the last `limit` bytes:
    a candidate that prints without end fills neither memory nor disk."""

    def __init__(self, stream, limit: int = 64 * 1024):
        self._chunks: deque[bytes] = deque()
        self._size, self._limit = 0, limit
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream) -> None:
        with stream:
            for chunk in iter(lambda: stream.read1(65536), b""):
                with self._lock:
                    self._chunks.append(chunk)
                    self._size += len(chunk)
                    while self._size > self._limit and len(self._chunks) > 1:
                        self._size -= len(self._chunks.popleft())

    def text(self, limit: int) -> str:
        self._thread.join(timeout=1)
        with self._lock:
            return b"".join(self._chunks)[-limit:].decode(errors="replace")


class Worker:
    """One sandbox worker process and its request/reply channel."""

    def __init__(self, spec: LaunchSpec):
        self.spec = spec
        self.proc: subprocess.Popen | None = None
        self.plan: dict[str, Any] = {}
        self._output: _OutputTail | None = None
        self._req_w = self._resp_r = -1
        self._control_w = -1  # the supervisor stops everything below it when this pipe closes
        self._end_lock = threading.Lock()
        self._watch: ScratchWatch | None = None
        self.memory: memory_cgroup.MemoryCgroup | None = None  # the worker's memory cgroup, while it exists
        self.memory_cap_bytes: int | None = None  # the cap, once the worker is seen inside its cgroup
        self.memory_peak_bytes: int | None = None  # the most its cgroup held, read when the worker ended
        self._sys_path: list[str] = []
        self.spawned_at = 0.0
        self.stray_frames = 0  # reply frames that answered no pending request: only a candidate writes those
        self._pending: PendingReply | None = None  # the request sent whose reply is not read yet
        self._reply_watch: _ReplyWatch | None = None  # notes when that reply arrives, while the judge is busy

    # -- life cycle -------------------------------------------------------------------------
    def spawn(self) -> None:
        """Start the process: it imports torch and the DSL, captures the timing primitives and
        waits for `init`. Nothing of a candidate runs yet, and the GPU is not touched, so a worker
        can be spawned ahead while another evaluation uses the GPU (evaluate.standby)."""
        scratch = self.spec.scratch
        for sub in ("tmp", ".cache"):  # a previous worker in this directory may have left a link there
            scratch_files.fresh_directory(scratch, sub)
        self._sys_path = import_paths()
        self.plan = isolation_plan(self._sys_path)
        if self.plan["drop_uid"]:
            hand_over(scratch)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(scratch / "tmp"),
            "TMPDIR": str(scratch / "tmp"),
            "LANG": "C.UTF-8",
            "XDG_CACHE_HOME": str(scratch / ".cache"),
            "TRITON_CACHE_DIR": str(scratch / ".cache" / "triton"),
            "TORCHINDUCTOR_CACHE_DIR": str(scratch / ".cache" / "inductor"),
            "TORCHINDUCTOR_COMPILE_THREADS": "1",
            "CUDA_CACHE_PATH": str(scratch / ".cache" / "nv"),
        }
        env.update({k: os.environ[k] for k in _PASS_ENV if k in os.environ})
        env.setdefault("OMP_NUM_THREADS", str(min(os.cpu_count() or 1, _MAX_OMP_THREADS)))
        env.update(self.spec.env)
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        config = {
            "sys_path": self._sys_path,
            "req_fd": req_r,
            "resp_fd": resp_w,
            "output_fd": self.spec.output_fd,
            "warm": list(self.spec.warm),
        }
        argv = [*self.spec.wrapper, sys.executable, "-I", "-B", "-c", _BOOTSTRAP, json.dumps(config)]
        if self.plan["prefix"]:
            uid_switch = (
                [self.plan["setpriv"], f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_GID}", "--clear-groups"]
                if self.plan["drop_uid"]
                else []
            )
            hide = (
                ["sh", "-c", HIDE_SCRIPT, "sh", *hidden_dirs(self.spec), "--"] if self.plan["mount_namespace"] else []
            )
            argv = [*self.plan["prefix"], *hide, *self._root_prelude(), *uid_switch, *argv]
        inherited = (req_r, resp_w) if self.spec.output_fd is None else (req_r, resp_w, self.spec.output_fd)
        control_r = -1
        if self.plan["supervisor"]:  # no PID namespace: a child subreaper parents the worker (sandbox.supervisor)
            control_r, self._control_w = os.pipe()
            ids = {"user": SANDBOX_UID, "group": SANDBOX_GID} if self.plan["drop_uid"] else {}
            supervised = {"sys_path": self._sys_path, "argv": argv, "fds": inherited, "control_fd": control_r, **ids}
            argv = [sys.executable, "-I", "-B", "-c", SUPERVISOR_BOOTSTRAP, json.dumps(supervised)]
            inherited = (*inherited, control_r)
        self.memory = self._memory_cgroup()
        if self.memory is not None:  # joined before anything else runs: the namespaces and supervisor too
            argv = [*self.memory.join_prefix(), *argv]
            inherited = (*inherited, self.memory.procs_fd)
        self.spawned_at = time.perf_counter()
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=scratch,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=inherited,
                start_new_session=True,
            )
        except BaseException:
            if self.memory is not None:
                self.memory.remove()
                self.memory = None
            raise
        finally:
            for fd in (req_r, resp_w, control_r):
                if fd >= 0:
                    os.close(fd)
            if self.memory is not None:
                self.memory.close_join()
        self._output = _OutputTail(self.proc.stdout)
        self._req_w, self._resp_r = req_w, resp_r
        if self.watches_scratch:
            proc = self.proc
            self._watch = ScratchWatch(
                scratch,
                self.spec.scratch_bytes,
                lambda: {proc.pid, *process_tree.descendants(proc.pid)},
                self._end,
                lambda: proc.poll() is None,
            ).start()

    def _memory_cgroup(self) -> memory_cgroup.MemoryCgroup | None:
        """A new capped cgroup for this worker, or None (the plan's notes say why)."""
        cgroups = memory_cgroup.hierarchy()
        if isinstance(cgroups, str):
            return None
        cap = self.spec.memory_cap_bytes or memory_cgroup.default_cap(self.spec.host_memory_bytes)
        try:
            return memory_cgroup.MemoryCgroup.create(cgroups, cap)
        except OSError as exc:
            self.plan["notes"] = [*self.plan["notes"], f"no memory cgroup for this worker: {exc}"]
            return None

    @property
    def watches_scratch(self) -> bool:
        """Whether the scratch limit is the server's watchdog here (no tmpfs holds it)."""
        return bool(self.plan.get("scratch_watchdog")) and not self.spec.wrapper

    def _root_prelude(self) -> list[str]:
        """Commands run as root inside the namespaces before the uid switch: the task cap, the
        scratch quota and /dev/shm (mount namespace), loopback for a profiler (network namespace)."""
        prelude: list[str] = []
        if self.plan["mount_namespace"]:
            quota = str(_real(self.spec.scratch)) if self.plan["scratch_quota"] and not self.spec.wrapper else "-"
            owner = SANDBOX_UID if self.plan["drop_uid"] else os.geteuid()
            prelude += [
                "sh",
                "-c",
                _PRELUDE_SCRIPT,
                "sh",
                str(WORKER_TASKS + 1),
                quota,
                str(self.spec.scratch_bytes),
                str(owner),
                str(SHM_BYTES),
            ]
        if self.plan["net_namespace"] and self.spec.wrapper:
            prelude += [sys.executable, "-I", "-S", "-c", _LOOPBACK_UP]
        return prelude

    def start(self, init: InitRequest, poll: Callable[[], None] | None = None) -> dict[str, Any]:
        """Spawn the process unless `spawn` already did, and send `init` (completed with the
        limits and Landlock rules of this spec); returns the worker's init reply, with `start_s`
        (seconds from this call to the reply: what the caller waited) and `spawned_ahead_s` (how
        long before this call the process was spawned; 0 when now)."""
        t0 = time.perf_counter()
        if self.proc is None:
            self.spawn()
        elif self.plan["drop_uid"]:  # files written into the scratch directory since the spawn
            hand_over(self.spec.scratch)
        rlimits = dict(init.rlimits)
        if self.plan["drop_uid"]:  # counts every process of the uid, shared by all workers: the pid_max caps each
            rlimits["NPROC"] = 4096
        elif os.geteuid() != 0:  # the worker runs as this process's uid: what it has now, and WORKER_TASKS more
            rlimits["NPROC"] = _tasks_of(os.geteuid()) + WORKER_TASKS
        if self.watches_scratch:  # no single file passes the limit the watchdog enforces on their sum
            rlimits["FSIZE"] = min(int(rlimits.get("FSIZE", self.spec.file_size_bytes)), self.spec.scratch_bytes)
        rules = landlock_rules(self.spec, self._sys_path) if self.spec.landlock else {}
        init = dataclasses.replace(
            init,
            rlimits=rlimits,
            landlock=rules,
            use_landlock=self.spec.landlock,
            proc_self_rights=landlock.READ,
            tcp_ports=list(self.spec.tcp_ports),
            abstract_unix=self.spec.abstract_unix,
        )
        reply = self.request(init, timeout_s=self.spec.start_timeout_s, poll=poll)
        if self.memory is not None and self.proc is not None:  # the cap holds only if the join did
            if self.proc.pid in self.memory.pids():
                self.memory_cap_bytes = self.memory.limit
            else:
                self.plan["notes"] = [*self.plan["notes"], "the worker did not join its memory cgroup: no memory cap"]
        reply["start_s"] = time.perf_counter() - t0
        reply["spawned_ahead_s"] = max(0.0, t0 - self.spawned_at)
        return reply

    def _end(self) -> None:
        """Kill the worker's processes, leaving its channel to the thread that uses it: the
        supervisor's control pipe closed (it kills every descendant), else SIGKILL to the whole
        process group (with a PID namespace, every process in it)."""
        with self._end_lock:
            if self._control_w >= 0:
                os.close(self._control_w)
                self._control_w = -1
            elif self.proc is not None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def kill(self) -> None:
        """Kill the worker and everything it started; wait for it."""
        if self.proc is None:
            return
        self._end()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            if self.plan.get("supervisor"):  # a supervisor that did not finish: the last resort
                self.proc.kill()
        if self._watch is not None:
            self._watch.close()
        memory, self.memory = self.memory, None  # once, whichever thread kills
        if memory is not None:
            self.memory_peak_bytes = memory.peak_bytes()
            memory.remove()
        self._close()

    def stop(self) -> None:
        """Ask politely, then kill: nothing the candidate started outlives the worker."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                protocol.send(self._req_w, ExitRequest().wire())
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def _close(self) -> None:
        self._stop_reply_watch()  # it selects on the reply channel: stopped before the channel closes
        self._pending = None
        for fd in (self._req_w, self._resp_r):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._req_w = self._resp_r = -1

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self._req_w >= 0

    def log_tail(self, limit: int = 4000) -> str:
        """The end of what the worker printed (the candidate's prints included)."""
        return self._output.text(limit) if self._output else ""

    def _killed_for_memory(self) -> str:
        """Why the worker must end when its cgroup counted an OOM kill; "" when none did."""
        memory = self.memory
        return memory.reason() if memory is not None and memory.oom_kills() else ""

    # -- requests ---------------------------------------------------------------------------
    def request(self, request: Request, timeout_s: float, poll: Callable[[], None] | None = None) -> dict[str, Any]:
        """Send one request and wait for its reply (the worker's claims, shaped as
        `sandbox.messages.REPLIES[request.command]` if it is honest). Timeout → the worker is killed and
        WorkerTimeout raised; death → WorkerDied; poll() raising Cancelled → killed too."""
        return self.send(request, timeout_s).wait(poll)

    def send(self, request: Request, timeout_s: float, watch: bool = False) -> PendingReply:
        """Send one request without waiting: `wait` on what this returns reads its reply, with
        the semantics of `request`, whose `timeout_s` counts from here. `watch`: the judge will be
        busy before it waits, so a thread notes when the reply arrives (PendingReply.arrived_at).
        One request at a time: the previous one's reply must have been read."""
        if self._pending is not None:
            raise RuntimeError(f"{self._pending.command} is still awaiting its reply; wait for it first")
        pending = PendingReply(self, request.command, timeout_s)
        try:
            protocol.send(self._req_w, {**request.wire(), "nonce": pending.nonce})
        except (BrokenPipeError, protocol.ProtocolViolation) as exc:
            pending.send_error = exc  # raised by wait, as request raised it
            return pending
        self._pending = pending
        if watch:
            self._reply_watch = _ReplyWatch(self._resp_r)
        return pending

    def _stop_reply_watch(self) -> float | None:
        """Stop the reply watch (before anything reads or closes the channel); when the reply
        channel had data while it ran, the time it first had."""
        watch, self._reply_watch = self._reply_watch, None
        return watch.stop() if watch is not None else None

    def _wait(self, pending: PendingReply, poll: Callable[[], None] | None) -> dict[str, Any]:
        """PendingReply.wait: read frames until the one that answers `pending`, counting the others."""
        arrived = self._stop_reply_watch()  # data that came while the judge was busy: the time it came
        self._pending = None
        try:
            if pending.send_error is not None:
                raise pending.send_error
            while True:
                if arrived is not None and arrived > pending.deadline:  # it came too late, however soon read
                    raise protocol.ChannelTimeout("the reply arrived after the deadline")
                # a reply that began to arrive in time may finish arriving: the pipe holds 64 KiB at once
                started = arrived is not None
                left = max(pending.deadline - time.perf_counter(), READ_GRACE_S if started else 0.0)
                reply = protocol.receive(self._resp_r, timeout_s=left, poll=poll)
                pending.arrived_at = arrived if arrived is not None else time.perf_counter()
                if reply.get("nonce") == pending.nonce:
                    if self._watch is not None and self._watch.check():  # no reply counts from past the limit
                        tail = self.log_tail()
                        self.kill()
                        raise WorkerDied(None, tail, self._watch.reason)
                    killed = self._killed_for_memory()
                    if killed:  # v1 kills one process: end them all
                        tail = self.log_tail()
                        self.kill()
                        raise WorkerDied(None, tail, killed, out_of_memory=True)
                    return reply
                self.stray_frames += 1
                arrived = None  # when the next frame came is unknown: it counts from when it is read
        except protocol.ChannelTimeout:
            killed = self._killed_for_memory()
            if killed:  # it hung after a process of it was killed for memory
                tail = self.log_tail()
                self.kill()
                raise WorkerDied(None, tail, killed, out_of_memory=True) from None
            self.kill()
            raise WorkerTimeout(f"{pending.command} did not finish within {pending.timeout_s:.0f} s") from None
        except (protocol.ChannelClosed, BrokenPipeError, protocol.ProtocolViolation):
            code = None
            if self.proc is not None:
                try:
                    code = self.proc.wait(timeout=3)
                except subprocess.TimeoutExpired:  # it closed its pipe but lives on: no longer a worker
                    pass
            tail = self.log_tail()
            killed = self._killed_for_memory()
            reason = killed or (self._watch.reason if self._watch is not None else "")
            self.kill()
            raise WorkerDied(code, tail, reason, out_of_memory=bool(killed)) from None
        except Cancelled:
            self.kill()
            raise
