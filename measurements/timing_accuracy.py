#!/usr/bin/env python3
"""Does the evaluator's clock agree with Nsight Compute? Kernels from about 2 µs to 10 ms,
each timed by the evaluator's own loop and by `ncu --clock-control none`
(`gpu__time_duration.sum`), with the same launch configuration and inputs.

    python3 measurements/timing_accuracy.py --out FILE.json        # GPU: both measurements, one run
    python3 measurements/timing_accuracy.py --out FILE.json        # CPU: dry run (cases built and called once)

Evaluator side: `sandbox.timing.time_calls` as the worker calls it: warm-up and call counts
from `plan_calls`, fresh input sets as the evaluator sizes them, L2 flushed before every call,
median of the per-call event times. Nsight side: the same script, re-run under ncu in `--ncu-child` mode,
launches every case five times between cudaProfilerStart/Stop with a marker kernel before
each case, and ncu flushes caches before each launch (`--cache-control all`). Ratio =
evaluator median / ncu median (per call; a case that launches several kernels sums them).

Target: within 5 % above 20 µs. Below that the evaluator's event pair also
holds the host's launch latency (the GPU is idle when the start event fires, so the kernel
starts only once the host has launched it) — measurements/launch_floor.py measures that floor.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from measurements.bench_env import interpret_without_gpu  # noqa: E402

NCU_REPS = 5
NCU_TIMEOUT_S = 150
MARKER = "atrex_case_marker"
METRIC = "gpu__time_duration.sum"
SPIN_TARGET_MS = 10.0
# (name, kind, size): bandwidth-bound copies (elements, bf16, out of place), bf16 GEMMs (M=N=K
# or M,N,K), and a compute loop sized at run time to about SPIN_TARGET_MS.
CASE_SPECS: list[dict[str, Any]] = [
    {"name": "scale_4KiB", "kind": "scale", "n": 1 << 11},
    {"name": "scale_256KiB", "kind": "scale", "n": 1 << 17},
    {"name": "scale_4MiB", "kind": "scale", "n": 1 << 21},
    {"name": "scale_32MiB", "kind": "scale", "n": 1 << 24},
    {"name": "scale_128MiB", "kind": "scale", "n": 1 << 26},
    {"name": "scale_512MiB", "kind": "scale", "n": 1 << 28},
    {"name": "scale_2GiB", "kind": "scale", "n": 1 << 30},
    {"name": "gemm_2048", "kind": "gemm", "mnk": [2048, 2048, 2048]},
    {"name": "gemm_4096", "kind": "gemm", "mnk": [4096, 4096, 4096]},
    {"name": "gemm_8192", "kind": "gemm", "mnk": [8192, 8192, 8192]},
    {"name": "gemm_16384x16384x8192", "kind": "gemm", "mnk": [16384, 16384, 8192]},
    {"name": "spin_10ms", "kind": "spin", "iters": None},
]
CPU_LIMIT = {"scale": 1 << 12, "gemm": 64, "spin": 8}  # sizes for the CPU dry run


@dataclass
class Case:
    name: str
    spec: dict[str, Any]
    make_inputs: Callable[[], dict[str, Any]]
    fn: Callable[[dict[str, Any]], Any]
    input_bytes: int


def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

    @triton.jit
    def spin_kernel(out_ptr, iters, BLOCK: tl.constexpr):
        acc = tl.zeros([BLOCK], dtype=tl.float32) + tl.program_id(0)
        for _ in range(iters):
            acc = acc * 0.999 + 1.0
        tl.store(out_ptr + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK), acc)

    @triton.jit
    def atrex_case_marker():
        pass

    return scale_kernel, spin_kernel, atrex_case_marker


def build_cases(specs: list[dict[str, Any]], device: str) -> list[Case]:
    import torch

    scale_kernel, spin_kernel, _ = _kernels()
    cpu = device == "cpu"
    programs = 4 * (torch.cuda.get_device_properties(0).multi_processor_count if not cpu else 1)
    cases = []
    for spec in specs:
        kind = spec["kind"]
        if kind == "scale":
            n = min(spec["n"], CPU_LIMIT["scale"]) if cpu else spec["n"]
            make = lambda n=n: {"x": torch.randn(n, device=device, dtype=torch.bfloat16)}  # noqa: E731
            fn = lambda inp, n=n: _launch_scale(scale_kernel, inp["x"], n)  # noqa: E731
            size = 2 * n
        elif kind == "gemm":
            m, nn, k = [min(v, CPU_LIMIT["gemm"]) for v in spec["mnk"]] if cpu else spec["mnk"]

            def make(m: int = m, nn: int = nn, k: int = k) -> dict[str, Any]:
                return {
                    "a": torch.randn(m, k, device=device, dtype=torch.bfloat16),
                    "b": torch.randn(k, nn, device=device, dtype=torch.bfloat16),
                }

            fn = lambda inp: torch.matmul(inp["a"], inp["b"])  # noqa: E731
            size = 2 * (m * k + k * nn)
        else:
            iters = CPU_LIMIT["spin"] if cpu else int(spec["iters"])
            make = lambda: {"out": torch.empty(programs * 1024, device=device)}  # noqa: E731
            fn = lambda inp, iters=iters: _launch_spin(spin_kernel, inp["out"], iters, programs)  # noqa: E731
            size = programs * 1024 * 4
        cases.append(Case(spec["name"], spec, make, fn, size))
    return cases


def _launch_scale(kernel, x, n: int):
    import torch
    import triton

    y = torch.empty_like(x)
    kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    return y


def _launch_spin(kernel, out, iters: int, programs: int):
    kernel[(programs,)](out, iters, BLOCK=1024)
    return out  # the timing loop fingerprints what a call wrote


def calibrate_spin(specs: list[dict[str, Any]]) -> None:
    """Set the spin case's iteration count so that one launch takes about SPIN_TARGET_MS."""
    import torch

    probe = [dict(s, iters=20_000) for s in specs if s["kind"] == "spin"]
    if not probe:
        return
    case = build_cases(probe, "cuda")[0]
    inputs = case.make_inputs()
    case.fn(inputs)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    case.fn(inputs)
    end.record()
    torch.cuda.synchronize()
    per_iter_ms = start.elapsed_time(end) / 20_000
    for s in specs:
        if s["kind"] == "spin":
            s["iters"] = max(1, int(SPIN_TARGET_MS / per_iter_ms))


def evaluator_times(cases: list[Case], prims, flush_bytes: int) -> dict[str, dict[str, Any]]:
    """Each case through the worker's timing loop, sized as the evaluator sizes it (the
    estimate call, too, is timed with `prims`, as the worker times it); once with the
    evaluator's read flush and once flushing by writing (`write_flush_median_ms`, for comparison)."""
    import torch

    from atrex_mcp.evaluate.evaluator import MAX_TIMED_CALLS, MIN_TIMED_CALLS, timing_sets
    from sandbox.timing import fit_calls_to_sets, plan_calls, time_calls

    Event, record, elapsed, sync = (
        prims[name]
        for name in (
            "torch.cuda.Event",
            "torch.cuda.Event.record",
            "torch.cuda.Event.elapsed_time",
            "torch.cuda.synchronize",
        )
    )
    out = {}
    for case in cases:
        memory = torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else None
        sets_n = timing_sets(case.input_bytes, memory)
        warm = case.make_inputs()
        sets = [case.make_inputs() for _ in range(sets_n)]
        case.fn(warm)
        start, end = Event(enable_timing=True), Event(enable_timing=True)
        record(start)
        case.fn(warm)
        record(end)
        sync()
        plan = plan_calls(elapsed(start, end), minimum=MIN_TIMED_CALLS, maximum=MAX_TIMED_CALLS)
        calls, warmup = fit_calls_to_sets(plan.calls, sets_n), plan.warmup
        run = time_calls(prims, case.fn, warm, sets, calls, warmup, flush_bytes)
        q1, med, q3 = statistics.quantiles(run.times_ms, n=4, method="inclusive")
        written = time_calls(prims, case.fn, warm, sets, calls, warmup, flush_bytes, flush_by_writing=True)
        out[case.name] = {
            "median_ms": med,
            "iqr_ms": q3 - q1,
            "min_ms": min(run.times_ms),
            "calls": calls,
            "input_sets": sets_n,
            "write_flush_median_ms": statistics.median(written.times_ms),
        }
        del warm, sets, run, written
        torch.cuda.empty_cache()  # the next case's sets may need the space (a no-op without CUDA)
    return out


def above_20us(cases: dict[str, dict], key: str) -> dict:
    """The issue's target over kernels Nsight Compute times above 20 µs: every ratio within 5 %."""
    ratios = [c[key] for c in cases.values() if c.get(key) and c["ncu"]["median_ms"] > 0.02]
    return {
        "n": len(ratios),
        "max_abs_dev": max((abs(1 - r) for r in ratios), default=None),
        "within_5_percent": all(abs(1 - r) <= 0.05 for r in ratios) if ratios else None,
    }


def ncu_child(spec_file: Path) -> int:
    """Under ncu: every case NCU_REPS times between profiler start/stop, a marker before each."""
    import torch

    specs = json.loads(spec_file.read_text())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    _, _, marker = _kernels()
    cases = build_cases(specs, device)
    inputs = [c.make_inputs() for c in cases]
    marker[(1,)]()
    for case, inp in zip(cases, inputs):
        case.fn(inp)  # JIT and library warm-up outside the profiled range
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
    for case, inp in zip(cases, inputs):
        marker[(1,)]()
        for _ in range(NCU_REPS):
            case.fn(inp)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    return 0


def launches(csv_text: str) -> list[tuple[str, float]]:
    """(kernel name, gpu__time_duration in ns) per profiled launch, in launch order."""
    from atrex_mcp.profiling.ncu import HEADER_START, UNIT_SCALE

    lines = csv_text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(HEADER_START)), None)
    if start is None:
        return []
    rows = [
        r
        for r in csv.DictReader(line for line in lines[start:] if line.startswith('"'))
        if r.get("Metric Name") == METRIC
    ]
    rows.sort(key=lambda r: int(r["ID"]))
    return [
        (
            r["Kernel Name"],
            float(r["Metric Value"].replace(",", "")) * UNIT_SCALE.get(r.get("Metric Unit", "").strip(), 1.0),
        )
        for r in rows
    ]


def per_case_ncu(rows: list[tuple[str, float]], names: list[str], reps: int = NCU_REPS) -> dict[str, dict[str, Any]]:
    """Split launches at the markers; each case's launches form `reps` equal calls, whose
    kernel times are summed per call; median over the calls, in ms."""
    groups: list[list[tuple[str, float]]] = []
    for name, ns in rows:
        if MARKER in name:
            groups.append([])
        elif groups:
            groups[-1].append((name, ns))
    out = {}
    for case, group in zip(names, groups):
        if not group or len(group) % reps:
            out[case] = {"median_ms": None, "kernels_per_call": None, "note": f"{len(group)} launches for {reps} calls"}
            continue
        per = len(group) // reps
        calls = [sum(ns for _, ns in group[i * per : (i + 1) * per]) / 1e6 for i in range(reps)]
        out[case] = {
            "median_ms": statistics.median(calls),
            "kernels_per_call": per,
            "kernels": sorted({n[:80] for n, _ in group}),
        }
    return out


def run_ncu(specs: list[dict[str, Any]], work: Path) -> tuple[dict[str, dict[str, Any]], str]:
    from atrex_mcp.profiling.ncu import ncu_command, ncu_executable

    ncu = ncu_executable()
    if ncu is None:
        return {}, "ncu not found"
    spec_file, log = work / "cases.json", work / "ncu.csv"
    spec_file.write_text(json.dumps(specs))
    cmd = ncu_command(
        [sys.executable, str(Path(__file__).resolve()), "--ncu-child", str(spec_file)],
        [METRIC],
        log,
        ncu=ncu,
        launch_count=None,
    )
    cmd[1:1] = ["--profile-from-start", "off", "--cache-control", "all"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=NCU_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {}, f"ncu did not finish within {NCU_TIMEOUT_S} s"
    text = log.read_text(errors="replace") if log.exists() else ""
    tail = "\n".join(line for line in (proc.stdout + proc.stderr + text).splitlines() if not line.startswith('"'))[
        -3000:
    ]
    if proc.returncode != 0:
        return {}, f"ncu exited with {proc.returncode}: {tail}"
    return per_case_ncu(launches(text), [s["name"] for s in specs]), tail


def combine(
    specs: list[dict[str, Any]], evaluator: dict[str, dict[str, Any]], ncu: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Per case: both medians and their ratio (evaluator / ncu; None when either is missing)."""
    cases = {}
    for s in specs:
        e, n = evaluator.get(s["name"], {}), ncu.get(s["name"], {})
        ratio = e["median_ms"] / n["median_ms"] if e.get("median_ms") and n.get("median_ms") else None
        write_ratio = (
            e["write_flush_median_ms"] / n["median_ms"]
            if e.get("write_flush_median_ms") and n.get("median_ms")
            else None
        )
        cases[s["name"]] = {"spec": s, "evaluator": e, "ncu": n, "ratio": ratio, "write_flush_ratio": write_ratio}
    return cases


def render(report: dict[str, Any]) -> str:
    def fmt(value: float | None, digits: int) -> str:
        return "—" if value is None else f"{value:.{digits}f}"

    lines = ["| case | evaluator ms | ncu ms | kernels/call | ratio | write-flush ratio |", "|---|---|---|---|---|---|"]
    for name, c in report["cases"].items():
        lines.append(
            f"| {name} | {fmt(c['evaluator'].get('median_ms'), 5)} | {fmt(c['ncu'].get('median_ms'), 5)} | "
            f"{c['ncu'].get('kernels_per_call', '—')} | {fmt(c['ratio'], 3)} | {fmt(c.get('write_flush_ratio'), 3)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="result JSON")
    parser.add_argument("--ncu-child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cases", help="comma-separated case names (default all)")
    args = parser.parse_args(argv)
    if args.ncu_child:
        return ncu_child(args.ncu_child)
    import torch

    interpret_without_gpu()

    specs = [dict(s) for s in CASE_SPECS if not args.cases or s["name"] in args.cases.split(",")]
    report: dict[str, Any] = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "torch": torch.__version__}
    if not torch.cuda.is_available():
        for case in build_cases(specs, "cpu"):  # dry run: every case builds and runs once
            case.fn(case.make_inputs())
        with tempfile.TemporaryDirectory() as tmp:
            spec_file = Path(tmp) / "cases.json"
            spec_file.write_text(json.dumps([dict(s, iters=s.get("iters") or 1) for s in specs]))
            ncu_child(spec_file)
        report.update(device="cpu", note="not timed: no GPU", cases={s["name"]: None for s in specs})
    else:
        calibrate_spin(specs)
        from sandbox.timing import Primitives, flush_bytes_for

        report["device"] = torch.cuda.get_device_name(0)
        flush = flush_bytes_for(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0))
        evaluator = evaluator_times(build_cases(specs, "cuda"), Primitives.capture(), flush)
        torch.cuda.empty_cache()
        report["cases"] = combine(specs, evaluator, {})
        if args.out:  # kept if ncu hangs past the caller's limit
            args.out.write_text(json.dumps({**report, "note": "ncu pending"}, indent=1))
        with tempfile.TemporaryDirectory() as tmp:
            ncu, tail = run_ncu(specs, Path(tmp))
        report["ncu_output_tail"] = tail
        report["cases"] = combine(specs, evaluator, ncu)
        report["above_20us"] = above_20us(report["cases"], "ratio")
        report["above_20us_write_flush"] = above_20us(report["cases"], "write_flush_ratio")
        print(render(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k not in ("cases", "ncu_output_tail")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
