"""Does the GPU toolchain still work under the worker's seccomp filter, network namespace, task
cap and scratch quota, and do the sandbox escapes stay refused on the GPU machine?

    python3 measurements/sandbox_filters_gpu.py [--out measurements/results/sandbox_filters_h200.json] [--no-ncu]

Steps, each recorded (a failure does not stop the next):
1. plan: launcher.isolation_plan() on this machine (what `atrex-mcp doctor` reads);
2. eval: examples/rms_norm_triton.py on two shapes with timing: CUDA init, a Triton compile
   (ptxas and the launcher's gcc build under the filter), correctness and a timed run; the
   worker's Isolation record (seccomp_enforced, network_namespace, task_limit, scratch_bytes);
3. exploits: tests/exploits/{metadata_writes,network_egress,resource_limits,chmod_via_int80}
   with the same targets as tests/test_exploits_sandbox.py, their outcomes and whether each held;
4. ncu: profile_kernel's capture (Nsight Compute wrapping the worker: loopback in the network
   namespace, the filter after ncu's connection), when ncu is installed; if it fails, again with
   unix sockets and/or ncu's TCP ports re-allowed (SandboxOpenings), to say which one ncu needs.
Confirms the change when: eval is correct and timed on both shapes with seccomp_enforced and
network_namespace true; every exploit "held"; ncu "ok" (or ncu absent).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import stat
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from atrex_mcp.evaluate import EvalRequest, evaluate  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog  # noqa: E402
from measurements.bench_env import write_report  # noqa: E402

EXPLOITS = ROOT / "tests" / "exploits"
EXAMPLE = ROOT / "examples" / "rms_norm_triton.py"


def _attempts(result) -> dict | str:
    message = result.compile_error.message if result.compile_error else ""
    if "ATTEMPTS " not in message:
        return message[-1500:]
    return json.loads(message.split("ATTEMPTS ", 1)[1].splitlines()[0])


def _isolation(result) -> dict:
    return result.isolation.model_dump(mode="json") if result.isolation else {}


def step_plan() -> dict:
    from sandbox.launcher import import_paths, isolation_plan

    return isolation_plan(import_paths())


def step_eval(catalog: Catalog) -> dict:
    t0 = time.perf_counter()
    result = evaluate(EvalRequest(op="rms_norm", source=EXAMPLE.read_text(), shapes=["15", "0"], seeds=2), catalog)
    shapes = [
        {"id": s.id, "correct": s.correct, "category": s.category, "time_ms": s.time_ms, "message": s.message[:300]}
        for s in result.shapes
    ]
    iso = _isolation(result)
    ok = (
        result.compiled
        and all(s["correct"] and s["time_ms"] for s in shapes)
        and iso.get("seccomp_enforced")
        and iso.get("network_namespace")
    )
    return {
        "ok": bool(ok),
        "seconds": round(time.perf_counter() - t0, 1),
        "compiled": result.compiled,
        "compile_error": result.compile_error.message[-1500:] if result.compile_error else None,
        "shapes": shapes,
        "isolation": iso,
    }


def _metadata(catalog: Catalog, tmp: Path) -> dict:
    folder = tmp / "outside"
    folder.mkdir(mode=0o700)
    target = folder / "secret.json"
    target.write_text("{}")
    target.chmod(0o600)
    before = {str(p): (os.stat(p).st_mode, os.stat(p).st_uid, os.stat(p).st_mtime_ns) for p in (folder, target)}
    source = (
        (EXPLOITS / "metadata_writes.py")
        .read_text()
        .replace("TARGETS: dict = {}", f"TARGETS = {{'file': {str(target)!r}, 'dir': {str(folder)!r}}}")
    )
    result = evaluate(EvalRequest(op="rms_norm", source=source, shapes=["15"], seeds=1), catalog)
    attempts = _attempts(result)
    after = {str(p): (os.stat(p).st_mode, os.stat(p).st_uid, os.stat(p).st_mtime_ns) for p in (folder, target)}
    refused = isinstance(attempts, dict) and all(
        v == "PermissionError" for k, v in attempts.items() if k != "open O_PATH"
    )
    return {
        "held": refused and before == after,
        "attempts": attempts,
        "unchanged": before == after,
        "isolation": _isolation(result),
    }


def _network(catalog: Catalog, tmp: Path) -> dict:
    udp, tcp, unix = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(), socket.socket(socket.AF_UNIX)
    path = tmp / "judge.sock"
    try:
        for s, address in ((udp, ("127.0.0.1", 0)), (tcp, ("127.0.0.1", 0)), (unix, str(path))):
            s.bind(address)
            s.setblocking(False)
        tcp.listen()
        unix.listen()
        os.chmod(path, 0o777)
        os.chmod(tmp, 0o755)
        targets = {"udp_port": udp.getsockname()[1], "tcp_port": tcp.getsockname()[1], "unix_path": str(path)}
        source = (EXPLOITS / "network_egress.py").read_text().replace("TARGETS: dict = {}", f"TARGETS = {targets!r}")
        result = evaluate(EvalRequest(op="rms_norm", source=source, shapes=["15"], seeds=1), catalog)
        received = []
        for name, s in (("udp", udp), ("tcp", tcp), ("unix", unix)):
            try:
                s.recv(64) if s is udp else s.accept()
                received.append(name)
            except BlockingIOError:
                pass
    finally:
        for s in (udp, tcp, unix):
            s.close()
    attempts = _attempts(result)
    refused = isinstance(attempts, dict) and all(v != "done" for v in attempts.values())
    return {
        "held": refused and not received,
        "attempts": attempts,
        "received": received,
        "isolation": _isolation(result),
    }


def _limits(catalog: Catalog, tmp: Path) -> dict:
    source = (EXPLOITS / "resource_limits.py").read_text()
    result = evaluate(EvalRequest(op="rms_norm", source=source, shapes=["15"], seeds=1), catalog)
    attempts = _attempts(result)
    held = isinstance(attempts, dict) and all("done" not in str(v) for v in attempts.values())
    return {"held": held, "attempts": attempts, "isolation": _isolation(result)}


def _int80(catalog: Catalog, tmp: Path) -> dict:
    target = tmp / "int80.json"
    target.write_text("{}")
    target.chmod(0o600)
    source = (EXPLOITS / "chmod_via_int80.py").read_text().replace('TARGET = ""', f"TARGET = {str(target)!r}")
    result = evaluate(EvalRequest(op="rms_norm", source=source, shapes=["15"], seeds=1), catalog)
    mode = stat.S_IMODE(os.stat(target).st_mode)
    message = result.compile_error.message[-600:] if result.compile_error else ""
    return {"held": mode == 0o600 and not result.compiled, "mode": oct(mode), "message": message}


def step_exploits(catalog: Catalog) -> dict:
    out = {}
    for name, run in (
        ("metadata_writes", _metadata),
        ("network_egress", _network),
        ("resource_limits", _limits),
        ("chmod_via_int80", _int80),
    ):
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="atrex-escape-") as tmp:
            try:
                out[name] = run(catalog, Path(tmp))
            except Exception:  # noqa: BLE001 — recorded, the next exploit still runs
                out[name] = {"held": None, "error": traceback.format_exc()[-2000:]}
        out[name]["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def step_ncu(catalog: Catalog) -> dict:
    from atrex_mcp.errors import AtrexError
    from atrex_mcp.profiling import ncu as ncu_mod
    from atrex_mcp.profiling.service import capture_counters

    if ncu_mod.ncu_executable() is None:
        return {"ok": None, "note": "ncu not installed"}
    base = ncu_mod.NCU_OPENINGS
    variants = {
        "default": base,  # what profile_kernel uses; the others only if it fails
        "unix_sockets": dataclasses.replace(base, abstract_unix=True),
        "tcp": dataclasses.replace(base, tcp_ports=ncu_mod.NCU_PORTS),
        "unix_sockets+tcp": dataclasses.replace(base, abstract_unix=True, tcp_ports=ncu_mod.NCU_PORTS),
    }
    out: dict = {}
    for name, openings in variants.items():
        t0 = time.perf_counter()
        try:
            report = capture_counters(
                "rms_norm", EXAMPLE.read_text(), "2", catalog, roofline=None, timeout_s=240, openings=openings
            )
            out[name] = {
                "ok": bool(report.kernels),
                "device": report.device,
                "sass": len(report.sass),
                "kernels": [(k.name[:60], k.launches, k.origin) for k in report.kernels],
            }
        except AtrexError as exc:
            out[name] = {"ok": False, "error": exc.info.model_dump(mode="json")}
        out[name]["seconds"] = round(time.perf_counter() - t0, 1)
        if out[name]["ok"]:
            break
    out["ok"] = out["default"]["ok"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "measurements" / "results" / "sandbox_filters_h200.json"))
    parser.add_argument("--no-ncu", action="store_true")
    args = parser.parse_args()
    catalog = Catalog()
    report: dict = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
        "uid": os.geteuid(),
    }
    steps = [("plan", step_plan), ("eval", lambda: step_eval(catalog)), ("exploits", lambda: step_exploits(catalog))]
    if not args.no_ncu:
        steps.append(("ncu", lambda: step_ncu(catalog)))
    for name, step in steps:
        try:
            report[name] = step()
        except Exception:  # noqa: BLE001
            report[name] = {"ok": False, "error": traceback.format_exc()[-3000:]}
        print(name, json.dumps(report[name], default=str)[:1500], flush=True)
    write_report(args.out, report)


if __name__ == "__main__":
    main()
