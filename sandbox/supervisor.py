"""A worker's parent where no PID namespace holds it (a non-root server): a small trusted process,
the child subreaper of exactly one worker. A candidate's child that calls setsid() or double-forks
re-parents here instead of to init, so when the worker ends, or the server closes the control pipe
(a kill, or the server's own death), every process below is killed and reaped. Only descendants of
this process are signalled. It runs as the server's uid outside the worker's Landlock domain, whose
signal scope (ABI 6) and seccomp filter (no ptrace) keep the candidate from stopping it.

The launcher (sandbox/launcher.py) starts it with the worker's command line; it exits as the worker did.
"""

from __future__ import annotations

import ctypes
import os
import resource
import select
import signal
import subprocess
import sys
from typing import Any

from sandbox import process_tree

_PR_SET_CHILD_SUBREAPER = 36
_REAP_EVERY_S = 1.0  # orphans that end while the worker lives are reaped this often


def _become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"sandbox supervisor: prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        sys.exit(97)


def _exit_as(status: int | None) -> None:
    """End with the worker's wait status: its exit code, or the signal that ended it."""
    if status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # the only two no handler can be set for
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else 1)


def main(config: dict[str, Any]) -> None:
    """config: argv (the worker's command), fds (descriptors it inherits), control_fd (the read end
    of a pipe only the server writes: end of file means stop), user/group (a uid switch, or null)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _become_subreaper()
    control = config["control_fd"]
    ids: dict[str, Any] = {}
    if config.get("user") is not None:
        ids = {"user": config["user"], "group": config["group"], "extra_groups": []}
    worker = subprocess.Popen(config["argv"], pass_fds=config["fds"], process_group=0, **ids)
    for fd in config["fds"]:
        os.close(fd)
    ended = os.pidfd_open(worker.pid)
    status: int | None = None
    while status is None:
        ready, _, _ = select.select([control, ended], [], [], _REAP_EVERY_S)
        status = next((s for pid, s in process_tree.reap_children() if pid == worker.pid), None)
        if control in ready and not os.read(control, 64):
            break
    for pid, reaped in process_tree.kill_descendants():
        if pid == worker.pid:
            status = reaped
    _exit_as(status)
