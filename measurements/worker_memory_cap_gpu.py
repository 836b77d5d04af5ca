"""Is each sandbox worker under a memory cap on the GPU machine, does a real CUDA worker still
judge a kernel under the default cap, and does the cap stop the sum of many small shared mappings?

    python3 measurements/worker_memory_cap_gpu.py [--out measurements/results/worker_memory_cap/<date>_h200.json]

Steps, each recorded (a failure does not stop the next):
1. plan: where worker cgroups are made here (cgroup version, the cgroup they go below, and why there
   when it is a cgroup of the server's own beside its cgroup) or why none, the launcher's plan
   (`memory_cgroup`, its base, its notes), and the v2 ancestry: the server's cgroup and each above it
   to the mount, with its process count, whether this server is there, cgroup.subtree_control,
   cgroup.controllers, cgroup.type and whether it is writable;
2. eval: examples/rms_norm_triton.py on shapes 15 and 0 with timing under the default cap
   (LaunchSpec.memory_cap_bytes unset): correct and timed, Isolation's memory_cap_bytes, and
   memory_peak_bytes (the most host memory the CUDA worker's cgroup held: what the default must leave room for);
3. attack: tests/exploits/shared_memory_sum.py (8 MiB MAP_SHARED | MAP_ANONYMOUS mappings touched
   to --attack-gib) in a CUDA worker capped at --cap-gib: the load must fail compile/compile_oom
   naming the cap;
4. leftovers: no worker cgroup of this process is left in the tree.
Confirms the change when: plan has a cgroup version; eval is correct and timed on both shapes with
memory_cap_bytes the default and memory_peak_bytes below it; the attack fails compile_oom naming
LaunchSpec.memory_cap_bytes; no leftovers. A plan without a cgroup says why (e.g. a read-only
/sys/fs/cgroup): the cap is then not active on this machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from atrex_mcp.evaluate import EvalRequest, evaluate  # noqa: E402
from atrex_mcp.evaluate import taxonomy as tx  # noqa: E402
from atrex_mcp.evaluate.evaluator import Trial  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog  # noqa: E402
from measurements.bench_env import write_report  # noqa: E402
from sandbox import memory_cgroup  # noqa: E402
from sandbox.launcher import import_paths, isolation_plan  # noqa: E402

EXAMPLE = ROOT / "examples" / "rms_norm_triton.py"
ATTACK = ROOT / "tests" / "exploits" / "shared_memory_sum.py"
GIB = 1 << 30


def step_plan() -> dict:
    found = memory_cgroup.hierarchy()
    plan = isolation_plan(import_paths())
    with open("/proc/self/cgroup") as fh:
        own = fh.read().splitlines()
    return {
        "ok": isinstance(found, memory_cgroup.Hierarchy),
        "cgroup_version": getattr(found, "version", None),
        "cgroup_base": str(getattr(found, "base", "")) or None,
        "placement": getattr(found, "note", None),
        "why_none": found if isinstance(found, str) else None,
        "plan_memory_cgroup": plan["memory_cgroup"],
        "plan_memory_cgroup_base": plan["memory_cgroup_base"],
        "plan_notes": plan["notes"],
        "proc_self_cgroup": own,
        "v2_ancestry": v2_ancestry(),
    }


def v2_ancestry() -> list[dict]:
    """The server's cgroup v2 directory and each one above it up to the mount: whether it holds
    processes (this one among them), what it gives its children and what it has (diagnosis when no
    placement is found)."""
    with open("/proc/self/cgroup") as fh:
        path = next((line.rstrip("\n")[3:] for line in fh if line.startswith("0::")), None)
    mount = next(((root, point) for root, point, kind, _ in memory_cgroup.cgroup_mounts() if kind == "cgroup2"), None)
    if path is None or mount is None:
        return [{"error": f"no cgroup2 membership ({path}) or mount ({mount})"}]
    directory = memory_cgroup.own_cgroup_dir(mount[1], mount[0], path)
    rows = []
    while directory is not None:
        row: dict = {"path": str(directory)}
        for name in ("cgroup.procs", "cgroup.subtree_control", "cgroup.controllers", "cgroup.type"):
            try:
                row[name] = (directory / name).read_text().split()
            except OSError as exc:
                row[name] = f"unreadable: {exc.strerror}"
        procs = row.pop("cgroup.procs")
        row["processes"] = len(procs) if isinstance(procs, list) else procs
        row["holds_this_server"] = isinstance(procs, list) and str(os.getpid()) in procs
        row["writable"] = os.access(directory, os.W_OK)
        rows.append(row)
        directory = None if directory == mount[1] else directory.parent
    return rows


def step_eval(catalog: Catalog, shapes: list[str]) -> dict:
    t0 = time.perf_counter()
    result = evaluate(EvalRequest(op="rms_norm", source=EXAMPLE.read_text(), shapes=shapes, seeds=2), catalog)
    judged = [
        {"id": s.id, "correct": s.correct, "category": s.category, "time_ms": s.time_ms, "message": s.message[:300]}
        for s in result.shapes
    ]
    iso = result.isolation
    cap, peak = iso.memory_cap_bytes, iso.memory_peak_bytes
    timed = all(s["correct"] and (s["time_ms"] or not result.device.name.lower().startswith("nvidia")) for s in judged)
    return {
        "ok": bool(result.compiled and timed and cap and peak and peak < cap),
        "seconds": round(time.perf_counter() - t0, 1),
        "compile_error": result.compile_error.message[-1500:] if result.compile_error else None,
        "shapes": judged,
        "memory_cap_gib": cap / GIB if cap else None,
        "memory_peak_gib": round(peak / GIB, 3) if peak else None,
        "warnings": iso.warnings,
    }


def step_attack(catalog: Catalog, shape: str, cap_gib: float, attack_gib: float) -> dict:
    source = ATTACK.read_text().replace("TOTAL = 1536 << 20", f"TOTAL = {int(attack_gib * GIB)}")
    trial = Trial(EvalRequest(op="rms_norm", source=source, shapes=[shape], seeds=1), catalog, None, None)
    cap = int(cap_gib * GIB)
    with tempfile.TemporaryDirectory(prefix="atrex-memcap-") as tmp:
        session = trial.open_session(Path(tmp))
        session.spec = dataclasses.replace(session.spec, memory_cap_bytes=cap)
        t0 = time.perf_counter()
        try:
            failure = trial.load(session)
        finally:
            session.stop()
    named = failure is not None and "LaunchSpec.memory_cap_bytes" in failure.message
    return {
        "ok": bool(failure and failure.category == tx.COMPILE_OOM and named),
        "seconds": round(time.perf_counter() - t0, 1),
        "failure": dataclasses.asdict(failure) if failure else "loaded: the attack was not stopped",
        "memory_cap_gib": cap_gib,
        "memory_peak_gib": round(session.isolation.memory_peak_bytes / GIB, 3)
        if session.isolation.memory_peak_bytes
        else None,
    }


def step_leftovers() -> dict:
    found = memory_cgroup.hierarchy()
    if isinstance(found, str):
        return {"ok": True, "left": [], "note": "no cgroup tree in use"}
    left = [n for n in os.listdir(found.base) if n.startswith(f"atrex-worker-{os.getpid()}-")]
    return {"ok": not left, "left": left}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    stamp = time.strftime("%Y-%m-%d", time.gmtime())
    default_out = ROOT / "measurements" / "results" / "worker_memory_cap" / f"{stamp}_h200.json"
    parser.add_argument("--out", default=str(default_out))
    parser.add_argument("--shapes", default="15,0", help="rms_norm shapes the example kernel is judged on")
    parser.add_argument("--cap-gib", type=float, default=8.0, help="the attack's cap: room for a CUDA worker's start")
    parser.add_argument("--attack-gib", type=float, default=12.0, help="what the attack maps and touches")
    args = parser.parse_args()
    catalog = Catalog()
    shapes = args.shapes.split(",")
    report: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "uid": os.geteuid()}
    steps = [
        ("plan", step_plan),
        ("eval", lambda: step_eval(catalog, shapes)),
        ("attack", lambda: step_attack(catalog, shapes[0], args.cap_gib, args.attack_gib)),
        ("leftovers", step_leftovers),
    ]
    for name, step in steps:
        try:
            report[name] = step()
        except Exception:  # noqa: BLE001
            report[name] = {"ok": False, "error": traceback.format_exc()[-3000:]}
        print(name, report[name], flush=True)
    report["ok"] = all(report[name].get("ok") for name, _ in steps)
    print("confirmed" if report["ok"] else "NOT confirmed", flush=True)
    write_report(args.out, report)


if __name__ == "__main__":
    main()
