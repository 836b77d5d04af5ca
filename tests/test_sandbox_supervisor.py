"""The supervisor that parents a worker where no PID namespace holds it, and the scratch watchdog's
measure: the pieces a non-root server relies on (test_sandbox_nonroot.py runs them end to end)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from sandbox import scratch_watch
from sandbox.launcher import SUPERVISOR_BOOTSTRAP, import_paths

# A "worker" that leaves a setsid() child and a double-forked grandchild behind, prints their pids, then
# exits 3 or (with "wait") sleeps until killed.
_WORKER = """
import os, sys, time
pids = []
for double in (False, True):
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if double and os.fork() != 0:
            os._exit(0)
        os.write(w, str(os.getpid()).encode())
        time.sleep(60)
        os._exit(0)
    pids.append(int(os.read(r, 32)))
print(pids, flush=True)
if sys.argv[1] == "wait":
    time.sleep(60)
sys.exit(3)
"""


def _supervise(mode: str) -> tuple[subprocess.Popen, int, list[int]]:
    control_r, control_w = os.pipe()
    config = {
        "sys_path": import_paths(),
        "argv": [sys.executable, "-c", _WORKER, mode],
        "fds": [],
        "control_fd": control_r,
    }
    proc = subprocess.Popen(
        [sys.executable, "-I", "-B", "-c", SUPERVISOR_BOOTSTRAP, json.dumps(config)],
        pass_fds=(control_r,),
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    os.close(control_r)
    assert proc.stdout is not None
    return proc, control_w, json.loads(proc.stdout.readline())


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


def test_detached_children_die_when_the_worker_exits():
    proc, control_w, strays = _supervise("exit")
    try:
        assert proc.wait(timeout=30) == 3  # the supervisor ends as its worker did
        assert [pid for pid in strays if _alive(pid)] == []
    finally:
        os.close(control_w)


def test_closing_the_control_pipe_kills_the_worker_and_its_detached_children():
    proc, control_w, strays = _supervise("wait")
    assert all(_alive(pid) for pid in strays)
    os.close(control_w)  # what Worker.kill does
    assert proc.wait(timeout=30) == -9
    assert [pid for pid in strays if _alive(pid)] == []


def test_usage_counts_each_inode_once_and_unlinked_open_files(tmp_path):
    block = b"\1" * (1 << 20)
    (tmp_path / "a.bin").write_bytes(block)
    os.link(tmp_path / "a.bin", tmp_path / "b.bin")  # the same blocks under two names
    (tmp_path / "link").symlink_to("/usr")  # never followed
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; f = open(sys.argv[1], 'wb'); f.write(b'x' * (4 << 20)); "
            "f.flush(); print(flush=True); time.sleep(60)",
            str(tmp_path / "hidden.bin"),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"\n"
        (tmp_path / "hidden.bin").unlink()  # its 4 MiB no directory walk sees
        walked, hidden = scratch_watch.usage(tmp_path, [])
        assert (1 << 20) <= walked < (2 << 20) and hidden == set()
        held, _ = scratch_watch.usage(tmp_path, [holder.pid])
        assert held - walked >= 4 << 20
    finally:
        holder.kill()
        holder.wait()


def test_the_watchdog_stops_a_worker_past_the_limit(tmp_path):
    stopped: list[float] = []
    watch = scratch_watch.ScratchWatch(tmp_path, 1 << 20, lambda: [], lambda: stopped.append(time.time()), lambda: True)
    watch.start()
    try:
        (tmp_path / "big.bin").write_bytes(b"\1" * (2 << 20))
        deadline = time.time() + 10
        while not stopped and time.time() < deadline:
            time.sleep(0.01)
        assert len(stopped) == 1 and "over the scratch limit of 1 MiB" in watch.reason, watch.reason
        assert watch.check() == watch.reason and len(stopped) == 1  # stopped once
    finally:
        watch.close()
