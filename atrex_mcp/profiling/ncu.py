"""Nsight Compute: the command line, the run with its metric retries, and the CSV parser.

ncu runs with `--clock-control none` (the GPU keeps its own boost behaviour, as in the
evaluator's timing), `--print-units base`, kernel replay, only inside an NVTX push/pop range
when one is named (`--nvtx --nvtx-include NAME/`: the slash marks a push/pop range), only the
named kernels when a regex is given (`--kernel-name-base function`: matched against the bare
function name), and at most `launch_count` profiled launches, so the cost is passes x
launches and nothing else. The CSV goes to a log file (ncu's own ==PROF== lines land there
too) so the wrapped program's stdout stays its own. A metric the installed ncu or the GPU
does not know makes ncu fail: the capture drops the named metric, retries, and reports it as
unavailable. A capture past its time limit is stopped and the error quotes the end of what
ncu printed. `ncu_command(target=[])` is the argv prefix for wrapping a process that someone
else starts (the evaluator's sandbox worker, profiling.service).
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import statistics
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from atrex_mcp.errors import AtrexError
from atrex_mcp.profiling.metrics import BY_NAME, HOPPER_METRICS
from atrex_mcp.profiling.models import KernelCounters
from sandbox import scratch as scratch_files
from sandbox.landlock import READ_EXEC

HEADER_START = '"ID","Process ID"'
MAX_METRIC_RETRIES = 4
# Multipliers to base units for the scaled units ncu prints without --print-units base.
UNIT_SCALE = {
    "nsecond": 1.0,
    "ns": 1.0,
    "usecond": 1e3,
    "us": 1e3,
    "msecond": 1e6,
    "ms": 1e6,
    "second": 1e9,
    "s": 1e9,
    "byte": 1.0,
    "Kbyte": 1e3,
    "Mbyte": 1e6,
    "Gbyte": 1e9,
    "Tbyte": 1e12,
    "KB": 1024.0,
    "MB": 1024.0**2,
    "GB": 1024.0**3,
}


def ncu_executable() -> str | None:
    """ncu on PATH, else the usual CUDA toolkit location; None when absent."""
    found = shutil.which("ncu")
    if found:
        return found
    for candidate in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        path = Path(candidate) / "bin" / "ncu"
        if candidate and path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


DEFAULT_LAUNCH_COUNT = 3
NCU_PORTS = tuple(range(49152, 49152 + 64))  # ncu's default --port and --max-connections: its front end listens there


@dataclass(frozen=True)
class SandboxOpenings:
    """What the profiled worker's Landlock domain leaves open for ncu's injected library, beyond
    the evaluator's allow-list: TCP ports, abstract unix sockets, and paths (path → rights)."""

    tcp_ports: tuple[int, ...] = ()
    abstract_unix: bool = False
    paths: tuple[tuple[str, int], ...] = ()

    def launch_fields(self) -> dict:
        """Keyword arguments for atrex_mcp.evaluate.LaunchOptions."""
        return {"tcp_ports": list(self.tcp_ports), "abstract_unix": self.abstract_unix, "extra_rules": dict(self.paths)}


# Settled on the H200 by measurements/ncu_probe.py: with the worker's normal domain ncu's injected library crashes the
# worker (SIGSEGV in "Failed to profile") whatever TCP, abstract-socket, /dev/shm, /tmp or /dev openings are added; it
# needs to read files outside the allow-list. With the whole file system readable (protected roots still left out by
# _add_tree, and covered by the mount namespace and the uid) it works, and no other opening is needed. Writes, TCP and
# abstract sockets stay closed.
NCU_OPENINGS = SandboxOpenings(paths=(("/", READ_EXEC),))
PASSES = re.compile(r"(\d+) pass(?:es)?\b")


def ncu_command(
    target: list[str],
    metrics: list[str],
    log_file: Path,
    *,
    ncu: str = "ncu",
    nvtx_range: str | None = None,
    kernel_regex: str | None = None,
    launch_count: int | None = DEFAULT_LAUNCH_COUNT,
    child_processes: bool = True,
) -> list[str]:
    """The ncu command line wrapping `target` (empty: the prefix for a wrapper). `child_processes`
    (`--target-processes all`) is needed when the kernels run in a process `target` starts."""
    cmd = [
        ncu,
        "--clock-control",
        "none",
        "--replay-mode",
        "kernel",
        "--target-processes",
        "all" if child_processes else "application-only",
        "--csv",
        "--print-units",
        "base",
        "--metrics",
        ",".join(metrics),
    ]
    if nvtx_range:
        cmd += ["--nvtx", "--nvtx-include", f"{nvtx_range}/"]
    if kernel_regex:
        cmd += ["--kernel-name-base", "function", "--kernel-name", f"regex:{kernel_regex}"]
    if launch_count:
        cmd += ["--launch-count", str(launch_count)]
    return cmd + ["--log-file", str(log_file), *target]


def replay_passes(output: str) -> list[int]:
    """Passes per profiled launch, from ncu's `==PROF== Profiling "k" ...: ... - N passes` lines."""
    return [
        int(m.group(1))
        for line in output.splitlines()
        if line.startswith("==PROF==") and "Profiling" in line
        for m in [PASSES.search(line)]
        if m
    ]


def _number(value: str, unit: str) -> float | None:
    text = value.strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan"):
        return None
    try:
        number = float(text)
    except ValueError:
        return None
    return number * UNIT_SCALE.get(unit.strip(), 1.0)


@dataclass
class ParsedCsv:
    kernels: list[KernelCounters] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)


def _csv_rows(text: str) -> list[dict[str, str]]:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(HEADER_START)), None)
    if start is None:
        return []
    body = [line for line in lines[start:] if line.startswith('"')]
    return list(csv.DictReader(body))


def parse_ncu_csv(text: str) -> ParsedCsv:
    """Per-kernel medians of each metric over its launches, from ncu --csv output (long form:
    one row per metric, or wide form: one column per metric plus a units row)."""
    rows = _csv_rows(text)
    if not rows:
        return ParsedCsv()
    per_launch: dict[str, dict[str, float]] = defaultdict(dict)
    launch_info: dict[str, tuple[str, str, str]] = {}
    seen_metrics: set[str] = set()
    answered: set[str] = set()
    long_form = "Metric Name" in rows[0]
    units: dict[str, str] = {}
    if not long_form and rows and not rows[0].get("ID"):
        units, rows = rows[0], rows[1:]
    for row in rows:
        launch = row.get("ID", "")
        if not launch:
            continue
        launch_info[launch] = (row.get("Kernel Name", ""), row.get("Block Size", ""), row.get("Grid Size", ""))
        if long_form:
            items = [(row["Metric Name"], row.get("Metric Unit", ""), row.get("Metric Value", ""))]
        else:
            items = [(name, units.get(name, ""), value) for name, value in row.items() if name in BY_NAME]
        for name, unit, value in items:
            seen_metrics.add(name)
            number = _number(value, unit)
            if number is not None:
                per_launch[launch][name] = number
                answered.add(name)
    by_kernel: dict[str, list[str]] = defaultdict(list)
    for launch, (name, _, _) in launch_info.items():
        by_kernel[name].append(launch)
    kernels = []
    for name, launches in by_kernel.items():
        metrics: dict[str, float] = {}
        for metric in seen_metrics:
            values = [per_launch[launch][metric] for launch in launches if metric in per_launch[launch]]
            if values:
                metrics[BY_NAME[metric].key if metric in BY_NAME else metric] = statistics.median(values)
        _, block, grid = launch_info[launches[0]]
        kernels.append(KernelCounters(name=name, launches=len(launches), block=block, grid=grid, metrics=metrics))
    kernels.sort(key=lambda k: -k.metrics.get("duration_ns", 0.0))
    return ParsedCsv(kernels=kernels, unavailable=sorted(seen_metrics - answered))


@dataclass
class NcuCapture:
    kernels: list[KernelCounters]
    unavailable: list[str]
    command: list[str]
    returncode: int
    output_tail: str
    passes: list[int] = field(default_factory=list)  # replay passes per profiled launch
    seconds: float = 0.0


def _rejected_metrics(output: str, requested: list[str]) -> list[str]:
    """Metrics that ncu's error lines name (unknown to this ncu version or GPU)."""
    errors = "\n".join(line for line in output.splitlines() if "==ERROR==" in line or "rror" in line)
    return [m for m in requested if re.search(re.escape(m.split(".")[0]), errors)]


def _run_bounded(
    cmd: list[str], *, cwd: Path, env: dict[str, str] | None, timeout_s: float
) -> tuple[int | None, str, str]:
    """(returncode or None on timeout, stdout, stderr). On timeout the whole process group gets
    SIGTERM, then SIGKILL after a grace period."""
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, err = proc.communicate(timeout=grace)
                return None, out or "", err or ""
            except subprocess.TimeoutExpired:
                continue
        return None, "", ""


@dataclass
class Attempt:
    """One run under ncu: its exit status (None: stopped at the time limit), what ncu and the
    target printed outside the CSV, and the CSV log."""

    returncode: int | None
    output: str
    log: str


MAX_LOG_BYTES = 64 << 20  # far above a capture of MAX launches with every metric


def read_log(workdir: Path, relative: str) -> str:
    """ncu's CSV log under `workdir`, which the profiled program can write: never through a link,
    only a regular file, at most MAX_LOG_BYTES ("" when absent)."""
    try:
        return scratch_files.read_text(Path(workdir), relative, MAX_LOG_BYTES) or ""
    except scratch_files.RefusedScratchFile as exc:
        raise AtrexError(
            "performance",
            "profiler_log_refused",
            f"ncu's log was not read: {exc}.",
            "The profiled program replaced ncu's log file; profile a kernel that leaves its scratch files alone.",
        ) from None


def printed_lines(stdout: str, stderr: str, log: str) -> str:
    """ncu's and the target's messages, without the CSV rows (ncu may put both in the log)."""
    return "\n".join(line for line in (stdout + stderr + "\n" + log).splitlines() if not line.startswith('"'))


def run_with_retries(
    attempt: Callable[[list[str], float], tuple[list[str], Attempt]],
    *,
    metrics: list[str] | None = None,
    timeout_s: float = 60.0,
) -> NcuCapture:
    """Call `attempt(metrics, seconds_left) -> (argv, Attempt)` until ncu accepts every metric it
    was given (rejected ones are dropped and listed as unavailable); `timeout_s` bounds all."""
    wanted = list(metrics or [m.name for m in HOPPER_METRICS])
    dropped: list[str] = []
    started = time.monotonic()
    for _ in range(MAX_METRIC_RETRIES + 1):
        cmd, result = attempt(wanted, max(timeout_s - (time.monotonic() - started), 1.0))
        tail = result.output[-1500:].strip() or "(nothing)"
        if result.returncode is None:
            raise AtrexError(
                "performance",
                "profile_timeout",
                f"ncu did not finish within {timeout_s:.0f} s ({len(replay_passes(result.output))} launches profiled "
                f"by then). ncu printed, last lines: {tail}",
                "If no launch was profiled, ncu could not reach the kernels' process (e.g. a sandbox that "
                "blocks its injection library or its TCP connection); otherwise profile fewer launches or metrics.",
            )
        if result.returncode == 0:
            parsed = parse_ncu_csv(result.log)
            return NcuCapture(
                parsed.kernels,
                sorted(set(parsed.unavailable) | set(dropped)),
                cmd,
                0,
                result.output[-4000:],
                passes=replay_passes(result.output),
                seconds=time.monotonic() - started,
            )
        rejected = _rejected_metrics(result.output, wanted)
        if not rejected:
            break
        dropped += rejected
        wanted = [m for m in wanted if m not in rejected]
    raise AtrexError(
        "performance",
        "profiler_failed",
        f"ncu exited with {result.returncode}. ncu printed, last lines: {tail}",
        "Profiling may need permission to GPU counters (NVreg_RestrictProfilingToAdminUsers=0) or root.",
    )


def capture(
    target: list[str],
    *,
    workdir: Path,
    env: dict[str, str] | None = None,
    metrics: list[str] | None = None,
    nvtx_range: str | None = None,
    kernel_regex: str | None = None,
    timeout_s: float = 60.0,
    launch_count: int | None = DEFAULT_LAUNCH_COUNT,
    child_processes: bool = True,
    ncu: str | None = None,
) -> NcuCapture:
    """Run the command `target` under ncu and parse what it measured."""
    tool = ncu or ncu_executable()
    if tool is None:
        raise AtrexError(
            "performance",
            "no_profiler",
            "Nsight Compute (ncu) is not installed here.",
            "Install Nsight Compute, or use the torch.profiler fallback.",
        )
    log_file = Path(workdir) / "ncu.csv"

    def attempt(wanted: list[str], left_s: float) -> tuple[list[str], Attempt]:
        scratch_files.unlink(Path(workdir), log_file.name)
        cmd = ncu_command(
            target,
            wanted,
            log_file,
            ncu=tool,
            nvtx_range=nvtx_range,
            kernel_regex=kernel_regex,
            launch_count=launch_count,
            child_processes=child_processes,
        )
        returncode, stdout, stderr = _run_bounded(cmd, cwd=workdir, env=env, timeout_s=left_s)
        log = read_log(Path(workdir), log_file.name)
        return cmd, Attempt(returncode, printed_lines(stdout, stderr, log), log)

    return run_with_retries(attempt, metrics=metrics, timeout_s=timeout_s)
