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
report = syscall_filter.install()
out = {"enforced": report.enforced, "denied": report.denied}
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
    done = subprocess.run([sys.executable, "-c", _UNDER_FILTER, str(tmp_path), shutil.which("gcc") or ""], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["enforced"] and {"fchmodat2", "socket", "io_uring_setup", "memfd_create"} <= set(out["denied"])
    if shutil.which("gcc"):
        assert out["build"] == 0 and out["call"] == 42  # ld's chmod of its output fails quietly; the library loads
    assert out["asyncio"] == "ok" and out["thread"] == "ok"
    assert out["private_map"] == 2 << 30 and out["small_shared_map"] == 1 << 20
    assert out["chmod"] == "PermissionError"


def test_isolation_plan_reports_every_layer():
    plan = isolation_plan(import_paths())
    for key in ("drop_uid", "pid_namespace", "mount_namespace", "net_namespace", "task_limit", "scratch_quota", "notes"):
        assert key in plan
    assert plan["seccomp"] == {"available": True, "error": ""}
    if plan["mount_namespace"]:
        assert plan["task_limit"] == 300
    json.dumps(plan)  # plain data: `atrex-mcp doctor` prints it
