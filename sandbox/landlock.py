"""Landlock (Linux ≥ 5.13) through raw syscalls: the worker restricts its own file system
view to an allow-list before it imports the candidate; the restriction cannot be lifted and
is inherited by every child process (compilers the DSL spawns included).

What is handled depends on the kernel's Landlock ABI: file access (1), cross-directory
links (2), truncation (3), TCP bind/connect (4), signals and abstract unix sockets leaving
the sandbox (6). Device ioctls are left unrestricted (the GPU driver needs them).
"""

from __future__ import annotations

import ctypes
import os
import platform
import stat
from dataclasses import dataclass, field

_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE = 1 << 13, 1 << 14
_FS_ABI1 = (1 << 13) - 1
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2

READ = READ_FILE | READ_DIR
READ_EXEC = READ | EXECUTE
READ_WRITE = (
    READ_EXEC
    | WRITE_FILE
    | REMOVE_DIR
    | REMOVE_FILE
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SYM
    | MAKE_FIFO
    | MAKE_SOCK
    | REFER
    | TRUNCATE
)
DEVICE = READ_FILE | WRITE_FILE | TRUNCATE


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


@dataclass
class LandlockReport:
    """What was enforced, for the evaluation record."""

    abi: int = 0
    enforced: bool = False
    handles: list[str] = field(default_factory=list)
    skipped_paths: list[str] = field(default_factory=list)
    tcp_ports: list[int] = field(default_factory=list)  # TCP ports still allowed (a profiler's channel)
    error: str = ""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI, 0 when unavailable (old kernel, disabled, other arch)."""
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        return 0
    version = _libc().syscall(numbers[0], None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def restrict(
    rules: dict[str, int], tcp_ports: list[int] | tuple[int, ...] = (), abstract_unix: bool = False
) -> LandlockReport:
    """Allow only `rules` (path → rights, applied beneath a directory); deny all other file
    access, TCP, and signals/abstract sockets leaving the sandbox where the ABI can.

    `tcp_ports` may still be bound and connected to, and `abstract_unix` leaves abstract unix
    sockets unscoped: what a profiler's injected library needs to reach its front end."""
    report = LandlockReport(abi=abi_version())
    if report.abi < 1:
        report.error = "Landlock is not available on this kernel"
        return report
    create, add_rule, restrict_self = _SYSCALLS[platform.machine()]
    libc = _libc()
    handled_fs = _FS_ABI1 | (REFER if report.abi >= 2 else 0) | (TRUNCATE if report.abi >= 3 else 0)
    attr = _RulesetAttr(handled_access_fs=handled_fs)
    size = 8
    report.handles.append("filesystem")
    if report.abi >= 4:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
        size = 16
        report.handles.append("tcp")
    if report.abi >= 6:
        attr.scoped = _SCOPE_SIGNAL | (0 if abstract_unix else _SCOPE_ABSTRACT_UNIX)
        size = 24
        report.handles.append("signals" if abstract_unix else "signals+abstract-unix")
    ruleset = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        report.error = f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}"
        return report
    try:
        for path, rights in rules.items():
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                report.skipped_paths.append(path)
                continue
            try:
                allowed = rights & handled_fs
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    allowed &= _FILE_RIGHTS
                rule = _PathBeneathAttr(allowed_access=allowed, parent_fd=fd)
                if (
                    libc.syscall(
                        add_rule,
                        ctypes.c_int(ruleset),
                        ctypes.c_int(_RULE_PATH_BENEATH),
                        ctypes.byref(rule),
                        ctypes.c_uint32(0),
                    )
                    != 0
                ):
                    report.skipped_paths.append(f"{path} ({os.strerror(ctypes.get_errno())})")
            finally:
                os.close(fd)
        for port in tcp_ports if report.abi >= 4 else ():
            port_rule = _NetPortAttr(allowed_access=_NET_BIND_TCP | _NET_CONNECT_TCP, port=port)
            if (
                libc.syscall(
                    add_rule,
                    ctypes.c_int(ruleset),
                    ctypes.c_int(_RULE_NET_PORT),
                    ctypes.byref(port_rule),
                    ctypes.c_uint32(0),
                )
                != 0
            ):
                report.error = f"landlock_add_rule(port {port}): {os.strerror(ctypes.get_errno())}"
                return report
            report.tcp_ports.append(port)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            report.error = f"prctl(NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}"
            return report
        if libc.syscall(restrict_self, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            report.error = f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}"
            return report
        report.enforced = True
        return report
    finally:
        os.close(ruleset)
