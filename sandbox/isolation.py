"""What the worker does to itself, after its own imports and before the candidate's:
resource limits, dropping every capability (when it still runs as root), the seccomp filter
(sandbox.syscall_filter) and Landlock. The policy as a whole is in sandbox/README.md.

The launcher (sandbox.launcher) already started it in a new session, with a minimal
environment, in the scratch directory, and — where the interpreter is reachable by it —
as uid/gid 65534 with no supplementary groups.
"""

from __future__ import annotations

import ctypes
import os
import resource
from dataclasses import asdict, dataclass, field
from typing import Any

from sandbox import landlock, syscall_filter

_PR_CAPBSET_DROP = 24
_LAST_CAP = 63
_CAP_VERSION_3 = 0x20080522
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
TASK_LIMIT_PID_MAX = 4096  # a pid_max at or below this was set by the launcher for the worker's namespace


@dataclass
class IsolationReport:
    """Every mechanism, whether it took effect, and why not where it did not."""

    uid: int
    gid: int
    groups: list[int]
    rlimits: dict[str, int] = field(default_factory=dict)
    capabilities_dropped: bool = False
    landlock: dict[str, Any] = field(default_factory=dict)
    seccomp: dict[str, Any] = field(default_factory=dict)
    task_limit: int | None = None  # most tasks (threads included) the worker's PID namespace can hold
    warnings: list[str] = field(default_factory=list)


def _vm_data_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0


def apply_rlimits(limits: dict[str, int], report: IsolationReport) -> None:
    """`limits` maps RLIMIT_* names to soft=hard values; "DATA_EXTRA" is added to the data
    segment already mapped (CUDA maps a lot at start-up, and that must keep working)."""
    for name, value in limits.items():
        resource_name = "RLIMIT_DATA" if name == "DATA_EXTRA" else f"RLIMIT_{name}"
        if name == "DATA_EXTRA":
            value = _vm_data_bytes() + value
        which = getattr(resource, resource_name)
        _soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        try:
            resource.setrlimit(which, (value, value))
            report.rlimits[resource_name] = value
        except (ValueError, OSError) as exc:
            report.warnings.append(f"{resource_name} not set: {exc}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities(report: IsolationReport) -> None:
    """Empty the bounding, effective, permitted and inheritable sets: a uid-0 worker keeps
    only the rights a file's owner bits give uid 0, which Landlock then narrows."""
    import platform

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(_LAST_CAP + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the kernel's last capability
    header = _CapHeader(version=_CAP_VERSION_3, pid=0)
    data = (_CapData * 2)()
    number = _SYS_CAPSET.get(platform.machine())
    if number is None or libc.syscall(number, ctypes.byref(header), data) != 0:
        report.warnings.append(f"capset failed: {os.strerror(ctypes.get_errno())}")
        return
    report.capabilities_dropped = True


def _task_limit() -> int | None:
    """The PID namespace's pid_max when the launcher lowered it (a cap on tasks, threads included,
    that holds for uid 0 too, unlike RLIMIT_NPROC); None where it is the host's."""
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            value = int(fh.read())
    except (OSError, ValueError):
        return None
    return value - 1 if value <= TASK_LIMIT_PID_MAX else None


def enter(
    rlimits: dict[str, int],
    landlock_rules: dict[str, int] | None,
    tcp_ports: list[int] | None = None,
    abstract_unix: bool = False,
) -> IsolationReport:
    """Apply every mechanism this process can; the report says which ones held.
    `landlock_rules` None means Landlock was switched off by the operator (recorded);
    `tcp_ports`/`abstract_unix` are the openings a profiler wrapping the worker needs."""
    report = IsolationReport(uid=os.getuid(), gid=os.getgid(), groups=os.getgroups())
    apply_rlimits(rlimits, report)
    if os.geteuid() == 0:
        drop_capabilities(report)
    report.task_limit = _task_limit()
    filtered = syscall_filter.install(unix_sockets=abstract_unix, tcp=bool(tcp_ports))
    report.seccomp = asdict(filtered)
    if not filtered.enforced:
        report.warnings.append(
            f"seccomp filter not enforced ({filtered.error}): file metadata, sockets and shared "
            "memory are limited by uid, Landlock and the network namespace only"
        )
    if landlock_rules is None:
        report.landlock = asdict(
            landlock.LandlockReport(abi=landlock.abi_version(), error="disabled by ATREX_SANDBOX_LANDLOCK=0")
        )
        report.warnings.append(
            "Landlock disabled by ATREX_SANDBOX_LANDLOCK=0: hidden files are protected by uid and permissions only"
        )
        return report
    result = landlock.restrict(landlock_rules, tcp_ports=tcp_ports or [], abstract_unix=abstract_unix)
    report.landlock = asdict(result)
    if not result.enforced:
        report.warnings.append(f"Landlock not enforced: {result.error}")
    return report


def as_dict(report: IsolationReport) -> dict[str, Any]:
    return asdict(report)
