"""The seccomp filter alone (sandbox.syscall_filter), in a child process: what it refuses, and
that what the toolchain does under it (a C build and load, asyncio, threads, private memory)
still works. End-to-end attacks through a real worker are in test_exploits_sandbox.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from eval_support import ROOT
from sandbox import syscall_filter
from sandbox.launcher import import_paths, isolation_plan

pytestmark = pytest.mark.skipif(syscall_filter.available() != "", reason=syscall_filter.available() or "available")

_UNDER_FILTER = """
import asyncio, ctypes, json, mmap, os, subprocess, sys, threading
from sandbox import syscall_filter
go, early = threading.Event(), {}
def _early():  # a thread that exists before the filter, like CUDA's and torch's
    go.wait()
    try:
        os.chmod(sys.argv[1], 0o777)
        early["chmod"] = "done"
    except OSError as exc:
        early["chmod"] = type(exc).__name__
before = threading.Thread(target=_early)
before.start()
report = syscall_filter.install()
go.set()
before.join()
out = {"enforced": report.enforced, "denied": report.denied, "early_thread_chmod": early["chmod"]}
os.chdir(sys.argv[1])
with open("a.c", "w") as fh:
    fh.write("int f(int x) { return x + 1; }")
if sys.argv[2]:
    build = subprocess.run([sys.argv[2], "-shared", "-fPIC", "a.c", "-o", "a.so"], capture_output=True, text=True)
    out["build"] = build.returncode
    out["call"] = ctypes.CDLL(os.path.abspath("a.so")).f(41)
out["asyncio"] = asyncio.run(asyncio.sleep(0, "ok"))
t = threading.Thread(target=lambda: None); t.start(); t.join()
out["thread"] = "ok"
out["private_map"] = len(mmap.mmap(-1, 2 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))
out["small_shared_map"] = len(mmap.mmap(-1, 1 << 20))
try:
    os.chmod("a.c", 0o777)
    out["chmod"] = "done"
except OSError as exc:
    out["chmod"] = type(exc).__name__
print(json.dumps(out))
"""


def test_the_toolchain_works_under_the_filter_and_chmod_does_not(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _UNDER_FILTER, str(tmp_path), shutil.which("gcc") or ""],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["enforced"] and {"fchmodat2", "socket", "io_uring_setup", "memfd_create"} <= set(out["denied"])
    if shutil.which("gcc"):
        assert out["build"] == 0 and out["call"] == 42  # ld's chmod of its output fails quietly; the library loads
    assert out["asyncio"] == "ok" and out["thread"] == "ok"
    assert out["private_map"] == 2 << 30 and out["small_shared_map"] == 1 << 20
    assert out["chmod"] == "PermissionError" and out["early_thread_chmod"] == "PermissionError"


def test_isolation_plan_reports_every_layer():
    plan = isolation_plan(import_paths())
    for key in (
        "drop_uid",
        "pid_namespace",
        "mount_namespace",
        "net_namespace",
        "task_limit",
        "scratch_quota",
        "memory_cgroup",
        "notes",
    ):
        assert key in plan
    assert plan["seccomp"] == {"available": True, "error": ""}
    if plan["mount_namespace"]:
        assert plan["task_limit"] == 300
    json.dumps(plan)  # plain data: `atrex-mcp doctor` prints it


_WRAPPER_PROBE = """
import json, os, socket, sys
out = {}
try:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        socket.create_connection(server.getsockname(), timeout=2).close()
        out["own_loopback"] = "connected"
except OSError as exc:
    out["own_loopback"] = type(exc).__name__
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
    out["host_listener"] = "connected"
except OSError as exc:
    out["host_listener"] = type(exc).__name__
print("PROBE " + json.dumps(out), flush=True)
"""


@pytest.mark.skipif(
    not isolation_plan(import_paths())["net_namespace"], reason="no network namespace here (needs root)"
)
def test_a_wrapped_worker_has_its_own_loopback_and_no_way_to_the_host(tmp_path):
    """A profiler wrapping the worker talks to its injected library over loopback: the namespace's
    own, brought up for it; the judge's host stays out of reach."""
    import socket
    import time

    from sandbox.launcher import LaunchSpec, Worker

    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen()
    worker = Worker(
        LaunchSpec(
            scratch=tmp_path,
            device="cpu",
            protected=[],
            wrapper=[
                sys.executable,
                "-c",
                _WRAPPER_PROBE + "os.execvp(sys.argv[2], sys.argv[2:])",
                str(host.getsockname()[1]),
            ],
        )
    )
    try:
        worker.spawn()
        deadline = time.monotonic() + 30
        while "PROBE " not in worker.log_tail() and time.monotonic() < deadline:
            time.sleep(0.2)
        out = json.loads(worker.log_tail().split("PROBE ", 1)[1].splitlines()[0])
    finally:
        worker.kill()
        host.close()
    assert out == {"own_loopback": "connected", "host_listener": "ConnectionRefusedError"}


def test_without_the_binding_the_filter_says_why(monkeypatch):
    monkeypatch.setattr(syscall_filter, "pyseccomp", None)
    monkeypatch.setattr(syscall_filter, "_MISSING", "ModuleNotFoundError: No module named 'pyseccomp'")
    report = syscall_filter.install()
    assert not report.enforced and "pyseccomp" in report.error
    plan = isolation_plan(import_paths())
    assert plan["seccomp"]["available"] is False and any("no seccomp filter" in n for n in plan["notes"])
