"""`atrex-mcp doctor`: what this machine and this install give a user, one check a line, each
with a status and, where it is not fine, what to do. The isolation figures come from the
launcher's own plan (sandbox.launcher.isolation_plan) and, unless skipped, from a real worker
that judges the shipped example kernel at its smoke shape, as `eval` would."""

from __future__ import annotations

import os
import platform
import stat
import subprocess
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

Status = Literal["ok", "warn", "fail", "info"]
DEPLOY_DOC = "docs/deploy.md"


class Check(BaseModel):
    """One finding."""

    area: str = Field(
        description="What was checked: install, isolation, gpu, ncu, problems, wiki, state, claude, codex."
    )
    name: str = Field(description="The check within its area.")
    status: Status = Field(
        description="ok; warn (works, weaker or slower than it could be); fail (broken); info (a fact)."
    )
    detail: str = Field(description="What was found.")
    action: str = Field(default="", description="What to do about it; empty when nothing needs doing.")


class DoctorReport(BaseModel):
    """Every check, in the order printed."""

    version: str = Field(description="atrex-mcp version.")
    checks: list[Check] = Field(description="The findings.")

    @property
    def failed(self) -> bool:
        return any(c.status == "fail" for c in self.checks)


def isolation_summary(warnings: list[str]) -> str | None:
    """The one line `eval` and `demo` print when a worker ran with weaker isolation than it could."""
    if not warnings:
        return None
    count = f"{len(warnings)} sandbox limit{'s' if len(warnings) > 1 else ''}"
    return f"isolation: {count} on this machine; `atrex-mcp doctor` says which and what to do"


# ------------------------------------------------------------------ install
def install_checks() -> list[Check]:
    import atrex_mcp
    from atrex_mcp.paths import REPO_ROOT
    from atrex_mcp.registration import this_install

    package = Path(atrex_mcp.__file__).resolve().parent
    launch = this_install()
    kind = (
        "a wheel install"
        if "site-packages" in package.parts or "dist-packages" in package.parts
        else f"a checkout ({REPO_ROOT})"
    )
    command = " ".join([launch.command, *launch.args])
    return [
        Check(
            area="install",
            name="package",
            status="info",
            detail=f"atrex-mcp {atrex_mcp.__version__} from {package}: {kind}; Python {platform.python_version()}",
        ),
        Check(area="install", name="server command", status="info", detail=f"a client starts: {command}"),
    ]


# ------------------------------------------------------------------ isolation
def _seccomp_supported() -> bool:
    try:
        return any(line.startswith("Seccomp:") for line in Path("/proc/self/status").read_text().splitlines())
    except OSError:
        return False


def isolation_checks(plan: dict, landlock_abi: int) -> list[Check]:
    """From the launcher's plan for the next worker on this machine."""
    checks = []
    blocked = next((n for n in plan["notes"] if n.startswith("uid 65534 cannot reach")), None)
    if plan["drop_uid"]:
        checks.append(
            Check(
                area="isolation", name="uid switch", status="ok", detail="workers run as uid 65534 (nobody), no groups"
            )
        )
    elif os.geteuid() != 0:
        checks.append(
            Check(
                area="isolation",
                name="uid switch",
                status="info",
                detail=f"the server runs as uid {os.geteuid()}, not root: workers keep that uid "
                "(Landlock and rlimits confine them)",
                action=f"keep the agent on another account than the server's (the strong setup, {DEPLOY_DOC})",
            )
        )
    else:
        checks.append(
            Check(
                area="isolation",
                name="uid switch",
                status="warn",
                detail=blocked or "workers stay uid 0",
                action="install atrex-mcp with an interpreter every user can read (e.g. a venv under /opt, or a "
                f"container's system Python), not under /root ({DEPLOY_DOC})",
            )
        )
    if plan["pid_namespace"]:
        checks.append(
            Check(
                area="isolation", name="PID namespace", status="ok", detail="a worker and all its children die together"
            )
        )
    else:
        reason = next((n for n in plan["notes"] if "PID namespace" in n or "setpriv" in n), "not available")
        checks.append(
            Check(
                area="isolation",
                name="PID namespace",
                status="info" if plan.get("supervisor") else "warn",
                detail=reason,
                action="run the server as root with util-linux unshare and setpriv installed to hide other processes "
                "from the worker too",
            )
        )
    hides = plan["mount_namespace"]
    if hides:
        checks.append(
            Check(
                area="isolation",
                name="mount namespace",
                status="ok",
                detail="private /proc; protected folders covered by an empty tmpfs",
            )
        )
    else:
        checks.append(
            Check(
                area="isolation",
                name="mount namespace",
                status="warn" if landlock_abi else "fail",
                detail="none: protected folders are hidden by "
                + ("Landlock alone" if landlock_abi else "nothing but file permissions"),
                action="run the server as root where unshare --mount is allowed (a container needs CAP_SYS_ADMIN "
                "or a seccomp profile that allows unshare)",
            )
        )
    if landlock_abi >= 4:
        checks.append(
            Check(
                area="isolation",
                name="Landlock",
                status="ok",
                detail=f"ABI {landlock_abi}: files, TCP and (ABI 6) signals restricted",
            )
        )
    elif landlock_abi >= 1:
        checks.append(
            Check(
                area="isolation",
                name="Landlock",
                status="warn",
                detail=f"ABI {landlock_abi}: files restricted, TCP not (needs ABI 4, Linux 6.7)",
                action="a newer kernel (6.7+) lets the worker's network be closed too",
            )
        )
    else:
        checks.append(
            Check(
                area="isolation",
                name="Landlock",
                status="fail" if not hides else "warn",
                detail="unavailable in this kernel (or disabled by the boot options)",
                action="Linux 5.13+ with landlock in the lsm= boot list",
            )
        )
    checks.append(_seccomp_check(plan.get("seccomp")))
    checks.append(_memory_cap_check(plan))
    covered = (
        "uid 65534 cannot reach",
        "not running as root",
        "no PID namespace",
        "setpriv",
        "no mount namespace",
        "no seccomp filter",
        "no memory cgroup per worker",
    )
    for note in plan["notes"]:  # whatever else the launcher says it cannot do here
        if not note.startswith(covered):
            checks.append(Check(area="isolation", name="limit", status="warn", detail=note, action=f"see {DEPLOY_DOC}"))
    return checks


def _memory_cap_check(plan: dict) -> Check:
    """Whether each worker gets a memory cgroup (the only bound on the sum of its shared mappings)."""
    if plan.get("memory_cgroup"):
        return Check(
            area="isolation",
            name="memory cap",
            status="ok",
            detail=f"each worker and its children in a capped memory cgroup (cgroup v{plan['memory_cgroup']})"
            + (f"; {plan['memory_cgroup_placement']}" if plan.get("memory_cgroup_placement") else ""),
        )
    why = next((n for n in plan["notes"] if n.startswith("no memory cgroup per worker")), "no memory cgroup per worker")
    return Check(
        area="isolation",
        name="memory cap",
        status="warn",
        detail=why,
        action="run the server as root with the cgroup tree writable (a container: --cgroupns=private and a "
        f"writable /sys/fs/cgroup), or in a cgroup with the memory controller delegated ({DEPLOY_DOC})",
    )


def _seccomp_check(launcher_says: dict | None) -> Check:
    """The launcher's own answer where it installs a seccomp filter, else whether the kernel could."""
    if launcher_says is not None:
        if launcher_says.get("available"):
            return Check(area="isolation", name="seccomp", status="ok", detail="workers get a seccomp filter")
        return Check(
            area="isolation",
            name="seccomp",
            status="warn",
            detail=f"no seccomp filter: {launcher_says.get('error')}",
            action="install the seccomp binding the launcher names, on a kernel with CONFIG_SECCOMP_FILTER",
        )
    if _seccomp_supported():
        return Check(area="isolation", name="seccomp", status="ok", detail="the kernel supports seccomp filters")
    return Check(
        area="isolation",
        name="seccomp",
        status="warn",
        detail="no seccomp in this kernel",
        action="a kernel built with CONFIG_SECCOMP_FILTER",
    )


def worker_probe() -> Check:
    """Judge the shipped example at its smoke shape: what a real worker got, end to end."""
    from atrex_mcp.errors import AtrexError
    from atrex_mcp.evaluate import EvalRequest, evaluate
    from atrex_mcp.paths import examples_dir
    from atrex_mcp.problemset.catalog import Catalog

    example = examples_dir() / "rms_norm_triton.py"
    try:
        catalog = Catalog()
        if "rms_norm" not in catalog.names() or not example.is_file():
            return Check(
                area="isolation", name="worker", status="info", detail="not probed: no rms_norm problem or example here"
            )
        request = EvalRequest(
            op="rms_norm",
            source=example.read_text(),
            shapes=[catalog.visible("rms_norm").smoke_shape.id],
            seeds=1,
            timing=False,
            measure_dsl=False,
            timeout_s=300,
        )
        result = evaluate(request, catalog)
    except AtrexError as exc:
        return Check(
            area="isolation",
            name="worker",
            status="fail",
            detail=f"no worker could judge the example: {exc.info.message}",
            action=exc.info.hint or f"see {DEPLOY_DOC}",
        )
    iso = result.isolation
    if not result.compiled or not all(s.correct for s in result.shapes):
        first = result.compile_error or next(s for s in result.shapes if not s.correct)
        message = (first.message or "").strip().splitlines()
        return Check(
            area="isolation",
            name="worker",
            status="fail",
            detail=f"the example kernel failed in a worker: {message[-1] if message else first.category}",
            action="run `atrex-mcp eval` on the example with --json for the whole report",
        )
    # Every yes/no the evaluation records about its worker, so a layer added to the record shows here too.
    layers = [
        f"{name.replace('_', ' ')} {'yes' if held else 'no'}"
        for name, held in iso.model_dump().items()
        if isinstance(held, bool)
    ]
    held = [
        f"uid {iso.uid}",
        f"Landlock ABI {iso.landlock_abi} ({', '.join(iso.landlock_handles) or 'nothing'})",
        *layers,
    ]
    return Check(
        area="isolation",
        name="worker",
        status="warn" if iso.warnings else "ok",
        detail=f"a worker judged the example on {result.device.kind}: "
        + ", ".join(held)
        + (f"; {len(iso.warnings)} warning(s): " + " | ".join(iso.warnings) if iso.warnings else ""),
        action="see the checks above" if iso.warnings else "",
    )


# ------------------------------------------------------------------ GPU and profiler
def gpu_check() -> Check:
    from atrex_mcp.evaluate.device import describe

    info = describe()
    if info.kind != "cuda":
        return Check(
            area="gpu",
            name="device",
            status="warn",
            detail=f"no CUDA GPU visible to torch ({info.name}): kernels run in "
            "Triton's interpreter and nothing is timed",
            action="on a GPU host install a CUDA build of torch and check nvidia-smi and CUDA_VISIBLE_DEVICES",
        )
    clocks = (
        f"SM {info.sm_clock_mhz}/{info.max_sm_clock_mhz} MHz now/max, memory {info.mem_clock_mhz} MHz"
        if info.max_sm_clock_mhz
        else "clocks unknown (no NVML)"
    )
    slow = [r for r in info.throttle_reasons if r not in ("gpu_idle", "applications_clocks_setting")]
    return Check(
        area="gpu",
        name="device",
        status="warn" if slow else "ok",
        detail=f"{info.name}, driver {info.driver}, CUDA {info.cuda}, {info.sm_count} SMs; {clocks}"
        + (f"; throttled now: {', '.join(slow)}" if slow else ""),
        action="timings will be low while throttled: check cooling and power caps (nvidia-smi -q -d PERFORMANCE)"
        if slow
        else "",
    )


def _profiling_admin_only() -> bool:
    try:
        return "RmProfilingAdminOnly: 1" in Path("/proc/driver/nvidia/params").read_text()
    except OSError:
        return False


def ncu_check(plan: dict, has_gpu: bool) -> Check:
    from atrex_mcp.profiling.ncu import ncu_executable

    ncu = ncu_executable()
    if ncu is None:
        return Check(
            area="ncu",
            name="Nsight Compute",
            status="warn" if has_gpu else "info",
            detail="ncu not found: profile_kernel falls back to torch.profiler (kernel times, no counters)",
            action="install the CUDA toolkit's Nsight Compute, or put ncu on PATH / set CUDA_HOME" if has_gpu else "",
        )
    try:
        version = (
            subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        )
    except (OSError, subprocess.TimeoutExpired):
        version = []
    found = f"{ncu} ({version[-1] if version else 'version unknown'})"
    if not plan["drop_uid"]:
        return Check(
            area="ncu",
            name="Nsight Compute",
            status="warn",
            detail=f"{found}, unused: profiled workers must run as uid 65534 (see uid switch)",
            action="fix the uid switch above; until then profile_kernel uses torch.profiler",
        )
    if os.geteuid() != 0 and _profiling_admin_only():
        return Check(
            area="ncu",
            name="Nsight Compute",
            status="warn",
            detail=f"{found}; GPU counters are restricted to admins",
            action="load the driver with NVreg_RestrictProfilingToAdminUsers=0, or run the server as root",
        )
    return Check(area="ncu", name="Nsight Compute", status="ok", detail=found)


# ------------------------------------------------------------------ data and state
def problems_check() -> Check:
    from atrex_mcp.errors import AtrexError
    from atrex_mcp.problemset.catalog import Catalog

    try:
        catalog = Catalog()
        names = catalog.names()
    except AtrexError as exc:
        return Check(area="problems", name="problem set", status="fail", detail=exc.info.message, action=exc.info.hint)
    hidden = sum((catalog.problem_dir(n) / "metadata.json").is_file() for n in names)
    return Check(
        area="problems",
        name="problem set",
        status="ok" if names else "fail",
        detail=f"{len(names)} problems ({hidden} with hidden files) in {', '.join(str(r) for r in catalog.roots)}",
        action="" if names else "set ATREX_PROBLEMS to a problem set, or reinstall atrex-mcp",
    )


def wiki_check(state_dir: Path) -> Check:
    from atrex_mcp.errors import AtrexError
    from atrex_mcp.wiki.index import WikiIndex

    try:
        report = WikiIndex(state_dir=state_dir).last_refresh
    except (AtrexError, OSError, ValueError) as exc:
        return Check(
            area="wiki",
            name="index",
            status="fail",
            detail=f"the wiki index cannot be opened: {exc}",
            action=f"remove {state_dir / 'wiki-index'}; the next wiki_search rebuilds it",
        )
    total = report.added + report.updated + report.unchanged
    changed = f"; indexed now: {report.added} new, {report.updated} changed" if report.added or report.updated else ""
    return Check(area="wiki", name="index", status="ok", detail=f"{total} documents in {report.index_dir}{changed}")


def state_check(state_dir: Path) -> Check:
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # a new one is private from the start
        probe = state_dir / f".doctor-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        return Check(
            area="state",
            name="state dir",
            status="fail",
            detail=f"{state_dir} is not writable: {exc.strerror}",
            action="pass --state-dir to a folder this account owns, or set ATREX_STATE_DIR",
        )
    mode = stat.S_IMODE(state_dir.stat().st_mode)
    if mode & 0o007:
        return Check(
            area="state",
            name="state dir",
            status="warn",
            detail=f"{state_dir} (mode {mode:o}): other users can read run history",
            action=f"chmod 700 {state_dir}",
        )
    return Check(area="state", name="state dir", status="ok", detail=f"{state_dir} (mode {mode:o})")


# ------------------------------------------------------------------ clients
def client_checks(home: Path, project: Path, run_claude: bool = True) -> list[Check]:
    import shutil

    from atrex_mcp.registration import claude_entries, codex_config_file, codex_entries, judge, this_install

    launch = this_install()
    checks = []
    for client, (entries, errors), where in (
        ("claude", claude_entries(home, project), f"{home / '.claude.json'} or {project / '.mcp.json'}"),
        ("codex", codex_entries(home), str(codex_config_file(home))),
    ):
        fix = f"atrex-mcp config {client}"
        checks += [
            Check(area=client, name="config", status="warn", detail=e, action="fix the file's syntax") for e in errors
        ]
        if not entries:
            checks.append(
                Check(
                    area=client,
                    name="config",
                    status="info",
                    detail=f"no atrex-mcp server in {where}",
                    action=f"to use it from {'Claude Code' if client == 'claude' else 'Codex'}: `{fix}`",
                )
            )
        for e in (judge(e, launch) for e in entries):
            shown = " ".join([e.command, *e.args])
            checks.append(
                Check(
                    area=client,
                    name=f"server {e.name!r}",
                    status=e.verdict,
                    detail=f"{e.where}: {shown}" + (f" — {'; '.join(e.problems)}" if e.problems else ", this install"),
                    action="" if e.verdict == "ok" else f"replace it with what `{fix}` prints",
                )
            )
    claude = shutil.which("claude") if run_claude else None
    if claude:
        checks.append(_claude_list(claude, project))
    return checks


def _claude_list(claude: str, project: Path) -> Check:
    """`claude mcp list` connects to every registered server: the client's own verdict on ours."""
    try:
        done = subprocess.run([claude, "mcp", "list"], capture_output=True, text=True, timeout=90, cwd=project)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(area="claude", name="claude mcp list", status="warn", detail=f"did not answer: {exc}")
    ours = [line.strip() for line in done.stdout.splitlines() if "atrex" in line]
    if not ours:
        return Check(
            area="claude",
            name="claude mcp list",
            status="info",
            detail="lists no atrex server",
            action="`atrex-mcp config claude`",
        )
    bad = [line for line in ours if "Connected" not in line]
    return Check(
        area="claude",
        name="claude mcp list",
        status="fail" if bad else "ok",
        detail=" | ".join(ours),
        action="run the server command by hand to see its error" if bad else "",
    )


# ------------------------------------------------------------------ all of it
def run_checks(
    state_dir: Path,
    *,
    probe: bool = True,
    home: Path | None = None,
    project: Path | None = None,
    run_claude: bool = True,
) -> DoctorReport:
    from atrex_mcp import __version__
    from sandbox import landlock
    from sandbox.launcher import import_paths, isolation_plan

    plan = isolation_plan(import_paths())
    checks = install_checks()
    checks += isolation_checks(plan, landlock.abi_version())
    if probe:
        checks.append(worker_probe())
    from atrex_mcp.evaluate.device import has_gpu

    checks += [gpu_check(), ncu_check(plan, has_gpu()), problems_check(), state_check(state_dir), wiki_check(state_dir)]
    checks += client_checks(home or Path.home(), project or Path.cwd(), run_claude=run_claude)
    return DoctorReport(version=__version__, checks=checks)


_MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "info": "info"}


def render(report: DoctorReport) -> str:
    lines = [f"atrex-mcp {report.version} doctor ({sys.executable})"]
    for c in report.checks:
        lines.append(f"[{_MARK[c.status]}] {c.area:<9} {c.name}: {c.detail}")
        if c.action:
            lines.append(f"{'':17}-> {c.action}")
    counts = {s: sum(c.status == s for c in report.checks) for s in ("fail", "warn")}
    lines.append(f"{counts['fail']} failed, {counts['warn']} warnings")
    return "\n".join(lines)
