"""The worker's seccomp filter: the system calls Landlock does not govern, refused with EPERM.

Installed by the worker on itself (sandbox.isolation) before the candidate is imported, with
no_new_privs; a filter can never be removed and every child inherits it (compilers included).
Built with libseccomp through `pyseccomp` (a ctypes binding, pure Python: nothing to compile
on the GPU machine), which also handles the architecture checks: a system call made through
another ABI (int 0x80, x32), which the rules below would not match, kills the worker.

Refused everywhere, inside the scratch directory too:
* file metadata (mode, owner, extended attributes, times, inode flags): Landlock does not
  cover them, and a uid-0 worker owns every root-owned file. Nothing the toolchain runs needs
  them (Triton writes its cache with plain writes and os.replace; `ld` ignores a failed chmod
  of its output), and a path-based call cannot be limited to scratch: the path is a pointer.
* new sockets of any family (socketpair of a connected unix stream pair excepted: it reaches
  no one, and asyncio needs it), connect and bind: no egress, whatever the network
  namespace; a profiler's openings re-allow unix sockets or TCP (SandboxOpenings).
* mounts, namespaces, ptrace, module and key management, device nodes, file handles: the
  calls a thread that kept its capabilities could use (capset drops them for the calling
  thread only; CUDA's threads exist before it);
* io_uring (its operations bypass seccomp), memfd_create, memfd_secret and System V shared
  memory (memory outside every rlimit), and shared anonymous mappings or remaps larger than
  `shared_map_bytes` (RLIMIT_DATA does not count shared memory; RLIMIT_AS cannot be used
  with CUDA, which reserves a huge virtual range).
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass, field

try:
    import pyseccomp
except (ImportError, OSError, RuntimeError) as exc:  # not installed, or no libseccomp.so.2 on this machine
    pyseccomp = None
    _MISSING = f"{type(exc).__name__}: {exc}"
else:
    _MISSING = ""

METADATA_CALLS = (
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "chown32",
    "fchown32",
    "lchown32",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "utime",
    "utimes",
    "utimensat",
    "futimesat",
    "utimensat_time64",
)
# Newer than some libseccomp releases: the same number on x86_64 and aarch64 (the unified table).
NUMBERED_CALLS = {"setxattrat": 463, "removexattrat": 466, "file_setattr": 469, "memfd_secret": 447}
MEMORY_CALLS = ("memfd_create", "shmget", "shmat")
# What only capabilities allow, or what reaches past the sandbox's view: a thread that existed
# before the worker dropped its capabilities (capset changes the calling thread only) keeps them.
PRIVILEGED_CALLS = (
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "setns",
    "unshare",
    "mknod",
    "mknodat",
    "open_by_handle_at",
    "name_to_handle_at",
    "ptrace",
    "process_vm_writev",
    "bpf",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "syslog",
    "acct",
    "quotactl",
    "add_key",
    "request_key",
    "keyctl",
    "fsopen",
    "fsmount",
    "move_mount",
    "open_tree",
    "mount_setattr",
)
RING_CALLS = ("io_uring_setup", "io_uring_enter", "io_uring_register")
SOCKET_CALLS = ("connect", "bind", "listen", "accept", "accept4")
# ioctl commands that change inode flags or attributes (chattr): FS_IOC_SETFLAGS in its 64- and
# 32-bit encodings, FS_IOC_FSSETXATTR.
SETATTR_IOCTLS = (0x40086602, 0x40046602, 0x401C5820)
_MAP_SHARED, _MAP_SHARED_VALIDATE, _MAP_ANONYMOUS, _MAP_TYPE_MASK = 0x01, 0x03, 0x20, 0x03
_SOCK_TYPE_MASK = 0xF
DEFAULT_SHARED_MAP_BYTES = 1 << 30


@dataclass
class SeccompReport:
    """What the filter refuses, for the evaluation record; `error` says why it is not enforced."""

    enforced: bool = False
    denied: list[str] = field(default_factory=list)
    socket_families: list[str] = field(default_factory=list)  # families socket() may still create
    shared_map_bytes: int = 0
    error: str = ""


def available() -> str:
    """'' when a filter can be built here, else why not."""
    return f"pyseccomp unavailable ({_MISSING})" if pyseccomp is None else ""


def _syscall(name: str) -> int | None:
    if name in NUMBERED_CALLS:
        return NUMBERED_CALLS[name]
    number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
    return number if number >= 0 else None  # not a system call of this architecture


def _deny(flt, name: str, report: SeccompReport, *args) -> None:
    number = _syscall(name)
    if number is None:
        return
    flt.add_rule(pyseccomp.ERRNO(errno.EPERM), number, *args)
    if name not in report.denied:
        report.denied.append(name)


def _arg(index: int, op: int, a: int, b: int = 0):
    return pyseccomp.Arg(index, op, a, b)


def build(report: SeccompReport, *, unix_sockets: bool, tcp: bool, shared_map_bytes: int):
    """The filter object: allow by default, refuse each listed call (or call with those arguments)."""
    flt = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    flt.set_attr(pyseccomp.Attr.ACT_BADARCH, pyseccomp.KILL_PROCESS)  # the whole worker, not one thread
    # Every thread, not only the caller: CUDA and torch started threads before the filter, and a
    # signal handler the candidate installs through ctypes runs on whichever thread it targets.
    flt.set_attr(pyseccomp.Attr.CTL_TSYNC, 1)
    for name in (*METADATA_CALLS, *NUMBERED_CALLS, *MEMORY_CALLS, *RING_CALLS, *PRIVILEGED_CALLS):
        _deny(flt, name, report)
    for command in SETATTR_IOCTLS:
        _deny(flt, "ioctl", report, _arg(1, pyseccomp.MASKED_EQ, 0xFFFFFFFF, command))
    families = ([socket.AF_UNIX] if unix_sockets else []) + ([socket.AF_INET, socket.AF_INET6] if tcp else [])
    report.socket_families = [socket.AddressFamily(f).name for f in families]
    if not families:
        _deny(flt, "socket", report)
    else:  # every family but the allowed ones (NE on a deny rule: stray upper bits only widen it)
        for family in range(64):
            if family not in families:
                _deny(flt, "socket", report, _arg(0, pyseccomp.EQ, family))
        _deny(flt, "socket", report, _arg(0, pyseccomp.GE, 64))
    _deny(flt, "socketpair", report, _arg(0, pyseccomp.NE, socket.AF_UNIX))
    for kind in range(_SOCK_TYPE_MASK + 1):
        if kind != socket.SOCK_STREAM:
            _deny(flt, "socketpair", report, _arg(1, pyseccomp.MASKED_EQ, _SOCK_TYPE_MASK, kind))
    if not families:
        for name in SOCKET_CALLS:
            _deny(flt, name, report)
    report.shared_map_bytes = shared_map_bytes
    for shared in (_MAP_SHARED, _MAP_SHARED_VALIDATE):
        _deny(
            flt,
            "mmap",
            report,
            _arg(3, pyseccomp.MASKED_EQ, _MAP_TYPE_MASK | _MAP_ANONYMOUS, shared | _MAP_ANONYMOUS),
            _arg(1, pyseccomp.GT, shared_map_bytes),
        )
    _deny(flt, "mremap", report, _arg(2, pyseccomp.GT, shared_map_bytes))
    return flt


def install(
    *, unix_sockets: bool = False, tcp: bool = False, shared_map_bytes: int = DEFAULT_SHARED_MAP_BYTES
) -> SeccompReport:
    """Load the filter into this process (and so every child it starts from now on)."""
    report = SeccompReport()
    if pyseccomp is None:
        report.error = available()
        return report
    try:
        flt = build(report, unix_sockets=unix_sockets, tcp=tcp, shared_map_bytes=shared_map_bytes)
        flt.load()  # sets no_new_privs first (libseccomp's default)
    except (OSError, RuntimeError, ValueError) as exc:
        report.error = f"seccomp filter not loaded: {exc}"
        report.denied = []
        return report
    report.enforced = True
    return report
