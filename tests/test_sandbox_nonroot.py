"""The sandbox when the server runs as an ordinary user: no uid switch and no namespaces, only the
seccomp filter, Landlock and rlimits. The root test process starts a "server" under a throwaway
uid that owns nothing else; that server starts a worker the way the evaluator does (Trial, its
session and LaunchSpec) and loads tests/exploits/server_uid_attacks.py, which attacks at import
what that uid owns, the network and the machine, and lists each outcome (its errno) in its
import error. The root-setup twins of these attacks are in test_exploits_sandbox.py."""

from __future__ import annotations

import errno
import json
import os
import pwd
import resource
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from eval_support import ROOT, exploit_source, make_problem_root
from sandbox import syscall_filter
from sandbox.launcher import WORKER_TASKS

pytestmark = [
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU worker (TRITON_INTERPRET=1)"),
    pytest.mark.skipif(syscall_filter.available() != "", reason=syscall_filter.available() or "available"),
]

SCRATCH_BYTES = 16 << 20  # the worker's scratch size limit here: small, so passing it costs little
SCRATCH_SLACK = 256 << 20  # what one 50 ms polling interval may let a worker write past it, with room for a slow disk

# The "server": starts one worker the way `evaluate()` does and loads the candidate there.
_SERVER = """
import dataclasses, json, os, sys, tempfile
from pathlib import Path
from atrex_mcp.evaluate import EvalRequest
from atrex_mcp.evaluate.evaluator import Trial
from atrex_mcp.problemset.catalog import Catalog
config = json.loads(sys.argv[1])
request = EvalRequest(op="rms_norm", source=config["source"], shapes=["0"], seeds=1)
trial = Trial(request, Catalog(Path(config["problems"])), None, None)
scratch = Path(tempfile.mkdtemp(prefix="atrex-worker-"))
session = trial.open_session(scratch)
session.spec = dataclasses.replace(session.spec, scratch_bytes=config["scratch_bytes"])
try:
    failure = trial.load(session)
finally:
    session.stop()
held = {}  # what the worker's files take on disk after it ended: each inode once, links not followed
for folder, dirs, files in os.walk(scratch):
    for name in dirs + files:
        st = os.lstat(os.path.join(folder, name))
        held[st.st_ino] = st.st_blocks * 512
out = {
    "failure": dataclasses.asdict(failure) if failure else None,
    "isolation": session.isolation.model_dump(),
    "scratch_held": sum(held.values()),
}
print("SERVER " + json.dumps(out), flush=True)
"""

# Run as root in a private mount namespace when the interpreter lies below a directory others
# cannot search (e.g. /root, mode 0700): a 0755 tmpfs over that directory "$1" holding only its
# entry "$2" on the way to the interpreter, bound back from "$3"; the rest of the tree unchanged.
_REACH_SCRIPT = (
    'mount --bind "$1/$2" "$3" && mount -t tmpfs -o mode=0755 atrex-reach "$1" && mkdir "$1/$2" && '
    'mount --bind "$3" "$1/$2" || exit 95; shift 3; exec "$@"'
)


def _process_owners() -> dict[int, int]:
    owners = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            owners[int(pid)] = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            continue
    return owners


def _unused_uid() -> int:
    """A uid with no account and no process: RLIMIT_NPROC counts only this test's tasks."""
    owners = set(_process_owners().values())
    for uid in range(61_000, 65_000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            if uid not in owners:
                return uid
    pytest.skip("no unused uid in 61000-64999")


def _processes_of(uid: int) -> list[int]:
    return [pid for pid, owner in _process_owners().items() if owner == uid]


def _reach_prefix(hold: Path) -> list[str]:
    """Commands that make the interpreter reachable by another uid ([] when it already is)."""
    prefix = Path(os.path.realpath(sys.base_prefix))
    blocked = [p for p in reversed(prefix.parents) if not p.stat().st_mode & stat.S_IXOTH]
    if not blocked:
        return []
    if sys.prefix != sys.base_prefix or not _is_within(Path(os.path.realpath(sys.executable)), prefix):
        pytest.skip(f"another uid cannot reach the interpreter under {blocked[0]}, and a venv's is not bound open here")
    unshare = shutil.which("unshare")
    below = prefix.relative_to(blocked[0]).parts[0]
    if len(blocked) > 1 or unshare is None:
        pytest.skip(f"another uid cannot reach the interpreter under {blocked[0]} (and it cannot be bound open here)")
    hold.mkdir(mode=0o700)
    return [
        unshare,
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        _REACH_SCRIPT,
        "sh",
        str(blocked[0]),
        below,
        str(hold),
    ]


def _is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@pytest.fixture(scope="module")
def server():
    """Runs the server once as a throwaway uid; yields its report, the attempts, and what it attacked."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start the server under another uid")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) missing: cannot start the server under another uid")
    uid = _unused_uid()
    base = Path(tempfile.mkdtemp(prefix="atrex-nonroot-"))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        base.chmod(0o755)
        tree = base / "tree"  # the package as this uid can read it, wherever the checkout lies
        for package in ("atrex_mcp", "sandbox"):
            shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__"))
        problems = make_problem_root(base / "problems")
        home, outside, sockets = base / "home", base / "outside", base / "sockets"
        for folder in (home, outside, sockets):
            folder.mkdir()
        target = outside / "server-state.json"  # the server uid's own file, outside any scratch
        target.write_text("{}")
        for path, mode in ((target, 0o600), (outside, 0o700), (home, 0o700)):
            os.chown(path, uid, uid)
            path.chmod(mode)
        udp.bind(("127.0.0.1", 0))
        unix.bind(str(sockets / "judge.sock"))
        unix.listen()
        for s in (udp, unix):
            s.setblocking(False)
        os.chmod(sockets / "judge.sock", 0o777)  # permissions let the uid connect: only the sandbox stops it
        targets = {
            "file": str(target),
            "dir": str(outside),
            "udp_port": udp.getsockname()[1],
            "unix_path": str(sockets / "judge.sock"),
            "scratch_bytes": SCRATCH_BYTES,
        }
        before = os.stat(target)
        source = exploit_source("server_uid_attacks").replace("TARGETS: dict = {}", f"TARGETS = {targets!r}")
        config = {"source": source, "problems": str(problems), "scratch_bytes": SCRATCH_BYTES}
        as_uid = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "TMPDIR": str(home),
            "ATREX_STATE_DIR": str(home / "state"),
            "PYTHONPATH": str(tree),
            "TRITON_INTERPRET": "1",
            "LANG": "C.UTF-8",
        }
        reach = _reach_prefix(base / "hold")
        probe = subprocess.run(
            [*reach, *as_uid, sys.executable, "-B", "-c", "import torch, triton, pyseccomp, atrex_mcp.evaluate"],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if probe.returncode != 0:
            pytest.skip(f"uid {uid} cannot run this interpreter and package: {probe.stderr.strip()[-300:]}")
        done = subprocess.run(
            [*reach, *as_uid, sys.executable, "-B", "-c", _SERVER, json.dumps(config)],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0 and "SERVER " in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
        report = json.loads(done.stdout.split("SERVER ", 1)[1].splitlines()[0])
        failure = report["failure"]
        assert failure and failure["category"] == "import_error" and "ATTEMPTS " in failure["message"], failure
        attempts = json.loads(failure["message"].split("ATTEMPTS ", 1)[1].splitlines()[0])
        print(f"scratch held after the worker ended: {report['scratch_held']} bytes")
        escaped = attempts.get("escape group")
        survivors = {pid: isinstance(escaped, int) and pid == escaped for pid in _processes_of(uid)}
        yield {
            "uid": uid,
            "isolation": report["isolation"],
            "attempts": attempts,
            "target": target,
            "before": before,
            "listeners": (udp, unix),
            "survivors": survivors,
            "failure": failure,
            "scratch_held": report["scratch_held"],
        }
    finally:
        for pid in _processes_of(uid):  # only what this fixture's throwaway uid started
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        udp.close()
        unix.close()
        shutil.rmtree(base, ignore_errors=True)


def test_the_worker_keeps_the_server_uid_under_seccomp_landlock_and_rlimits(server):
    isolation = server["isolation"]
    assert isolation["uid"] == server["uid"] == server["attempts"]["uid"]
    assert not (isolation["pid_namespace"] or isolation["mount_namespace"] or isolation["network_namespace"])
    assert isolation["seccomp_enforced"] and isolation["landlock_enforced"], isolation["warnings"]
    assert isolation["task_limit"] is None and isolation["scratch_bytes"] == SCRATCH_BYTES
    assert isolation["memory_cap_bytes"] is None  # the cgroup tree is root's: no cap, and the notes say why
    assert any(note.startswith("no memory cgroup per worker") for note in isolation["warnings"]), isolation["warnings"]
    assert any("not running as root" in note for note in isolation["warnings"]), isolation["warnings"]


_METADATA = (
    "chmod",
    "fchmodat",
    "fchmodat2",
    "chmod /proc/self/fd",
    "chown",
    "lchown",
    "fchownat",
    "utime",
    "utimensat",
    "setxattr",
    "removexattr",
)


def test_the_server_uids_own_file_keeps_its_metadata(server):
    """The uid owns the file, so only the seccomp filter refuses each call (EPERM)."""
    attempts = server["attempts"]
    assert {name: attempts[name] for name in _METADATA} == dict.fromkeys(_METADATA, "EPERM")
    was, now = server["before"], os.stat(server["target"], follow_symlinks=False)
    assert stat.S_ISREG(now.st_mode)
    for key in ("st_mode", "st_uid", "st_gid", "st_mtime_ns", "st_ctime_ns"):
        assert getattr(now, key) == getattr(was, key), key
    assert os.listxattr(server["target"], follow_symlinks=False) == []


def test_no_udp_datagram_or_unix_connection_reaches_the_host(server):
    attempts = server["attempts"]
    assert (attempts["udp sendto"], attempts["unix connect"]) == ("EPERM", "EPERM")
    udp, unix = server["listeners"]
    with pytest.raises(BlockingIOError):
        udp.recv(64)
    with pytest.raises(BlockingIOError):
        unix.accept()


def test_a_fork_bomb_stops_at_rlimit_nproc(server):
    """RLIMIT_NPROC is the uid's tasks when the worker starts (its own included) plus WORKER_TASKS:
    the bomb holds at most WORKER_TASKS children, then fork fails with EAGAIN."""
    attempts = server["attempts"]
    assert attempts["nproc limit"] != resource.RLIM_INFINITY
    bomb = attempts["fork bomb"]
    assert bomb["then"] == errno.errorcode[errno.EAGAIN] and 0 < bomb["held"] <= WORKER_TASKS, bomb


def test_no_file_grows_past_rlimit_fsize(server):
    """With no tmpfs to hold the scratch limit, RLIMIT_FSIZE is held to it: no single file passes it."""
    attempts = server["attempts"]
    assert attempts["fsize limit"] == SCRATCH_BYTES and attempts["past file size"] == "EFBIG", attempts


def test_writes_stop_at_the_scratch_size_limit(server):
    """The candidate writes 4 MiB files until it is 1 GiB past the limit: the server's scratch
    watchdog kills the worker first, with a failure that names the limit, and what the candidate's
    files hold stays within the limit plus what one polling interval lets it write."""
    assert "fill scratch" not in server["attempts"], server["attempts"]  # the worker died in the fill
    first_line = server["failure"]["message"].splitlines()[0]
    assert "scratch watchdog" in first_line and f"scratch limit of {SCRATCH_BYTES >> 20} MiB" in first_line, first_line
    assert SCRATCH_BYTES < server["scratch_held"] <= SCRATCH_BYTES + SCRATCH_SLACK, server["scratch_held"]


def test_no_process_of_the_candidate_outlives_its_worker(server):
    """A child that called setsid() has left the process group the launcher kills."""
    assert isinstance(server["attempts"]["escape group"], int), server["attempts"]["escape group"]
    assert server["survivors"] == {}, server["survivors"]
