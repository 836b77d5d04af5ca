#!/usr/bin/env python3
"""Is the judge stable? The same baseline evaluated twice, in separate processes, and the
per-shape ratio of the two median times.

    python3 measurements/stability.py --runs DIR_A DIR_B [--out FILE]            # compare two runs
    python3 measurements/stability.py --baseline torch-compile --work DIR [baselines.py options…]
        # run measurements/baselines.py twice (two processes, the second on exactly the shapes the
        # first completed), then compare

Figures: median and p90 of |1 − t_B/t_A| over shapes above 20 µs
(target: median < 2 %, p90 < 5 %), the same over every shape, and the worst shapes. When the
runs carry their schedules (multi-GPU), pairs timed on the same GPU and on different GPUs are
also reported apart, so GPU-to-GPU differences are not mistaken for run-to-run noise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

ABOVE_MS = 0.02
TARGET_MEDIAN, TARGET_P90 = 0.02, 0.05


def deviation_stats(ratios: Sequence[float]) -> dict[str, Any]:
    """n, median and p90 of |1 − ratio|; Nones for an empty list."""
    dev = sorted(abs(1.0 - r) for r in ratios)
    if not dev:
        return {"n": 0, "median_abs_dev": None, "p90_abs_dev": None, "max_abs_dev": None}
    p90 = dev[0] if len(dev) == 1 else statistics.quantiles(dev, n=10, method="inclusive")[-1]
    return {"n": len(dev), "median_abs_dev": statistics.median(dev), "p90_abs_dev": p90, "max_abs_dev": dev[-1]}


def _devices(run_dir: Path) -> dict[tuple[str, str], str]:
    """(op, shape) -> CUDA_VISIBLE_DEVICES of the process that timed it, from run.json."""
    path = run_dir / "run.json"
    if not path.is_file():
        return {}
    batches = json.loads(path.read_text()).get("schedule", {}).get("batches", [])
    return {
        (b["op"], s): str(b.get("visible_devices")) for b in batches if b.get("status") == "ok" for s in b["shapes"]
    }


def _timed(results) -> tuple[dict[tuple[str, str, str], float], dict[tuple[str, str, str], bool]]:
    """{(op, candidate, shape): median ms} of the timed shapes, and whether each was host-bound."""
    from atrex_mcp.evaluate import timing_checks

    times, host = {}, {}
    for r in results:
        for s in r.shapes:
            if s.time_ms:
                key = (r.op, r.candidate, s.id)
                times[key] = s.time_ms
                host[key] = bool(s.timing and timing_checks.host_bound(s.timing.host_late_calls, s.timing.calls))
    return times, host


def compare_runs(run_a: Path, run_b: Path, above_ms: float = ABOVE_MS) -> dict[str, Any]:
    """Per-shape time ratios B/A over the shapes both runs timed (same operator and baseline)."""
    from atrex_mcp.evaluate.table import load_results

    times_a, host_a = _timed(load_results(run_a))
    times_b, host_b = _timed(load_results(run_b))
    dev_a, dev_b = _devices(run_a), _devices(run_b)
    pairs = []
    for key in sorted(times_a.keys() & times_b.keys()):
        op, candidate, sid = key
        a, b = times_a[key], times_b[key]
        da, db = dev_a.get((op, sid)), dev_b.get((op, sid))
        pairs.append(
            {
                "op": op,
                "candidate": candidate,
                "shape": sid,
                "a_ms": a,
                "b_ms": b,
                "ratio": b / a,
                "same_gpu": None if da is None or db is None else da == db,
                "host_bound": host_a[key] or host_b[key],
            }
        )
    above = [p for p in pairs if min(p["a_ms"], p["b_ms"]) > above_ms]
    report: dict[str, Any] = {
        "runs": [str(run_a), str(run_b)],
        "above_ms": above_ms,
        "pairs": len(pairs),
        "above": deviation_stats([p["ratio"] for p in above]),
        "all": deviation_stats([p["ratio"] for p in pairs]),
        "target": {"median_abs_dev": TARGET_MEDIAN, "p90_abs_dev": TARGET_P90},
        "worst": sorted(pairs, key=lambda p: -abs(1 - p["ratio"]))[:10],
        "only_in_a": len(times_a.keys() - times_b.keys()),
        "only_in_b": len(times_b.keys() - times_a.keys()),
    }
    stats = report["above"]
    report["meets_target"] = (
        None if stats["n"] == 0 else stats["median_abs_dev"] < TARGET_MEDIAN and stats["p90_abs_dev"] < TARGET_P90
    )
    report["above_gpu_bound"] = deviation_stats([p["ratio"] for p in above if not p["host_bound"]])
    report["above_host_bound"] = deviation_stats([p["ratio"] for p in above if p["host_bound"]])
    if any(p["same_gpu"] is not None for p in pairs):
        report["above_same_gpu"] = deviation_stats([p["ratio"] for p in above if p["same_gpu"]])
        report["above_other_gpu"] = deviation_stats([p["ratio"] for p in above if p["same_gpu"] is False])
    report["ratios"] = [
        {k: p[k] for k in ("op", "candidate", "shape", "a_ms", "b_ms", "ratio", "host_bound")} for p in pairs
    ]
    return report


def render(report: dict[str, Any]) -> str:
    def pct(v: float | None) -> str:
        return "—" if v is None else f"{100 * v:.2f} %"

    lines = [
        f"Stability: {report['pairs']} shapes timed in both runs ({report['only_in_a']} only in A, "
        f"{report['only_in_b']} only in B)",
        "",
        "| shapes | n | median abs(1-ratio) | p90 | max |",
        "|---|---|---|---|---|",
    ]
    for key, label in (
        ("above", f"> {report['above_ms'] * 1e3:.0f} µs"),
        ("all", "all"),
        ("above_gpu_bound", "> 20 µs, GPU-bound"),
        ("above_host_bound", "> 20 µs, host-bound"),
        ("above_same_gpu", "> 20 µs, same GPU"),
        ("above_other_gpu", "> 20 µs, other GPU"),
    ):
        if key in report:
            s = report[key]
            lines.append(
                f"| {label} | {s['n']} | {pct(s['median_abs_dev'])} | {pct(s['p90_abs_dev'])} | "
                f"{pct(s['max_abs_dev'])} |"
            )
    lines += [
        "",
        f"Target (median < 2 %, p90 < 5 % above 20 µs) met: {report['meets_target']}",
        "",
        "Host-bound: the host outran the GPU spin on more than half of the timed calls in either run, so the",
        "GPU waited for launches inside the timed region and the time follows the host's speed.",
        "",
        "| worst op | shape | A ms | B ms | B/A | host-bound |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {p['op']} | {p['shape']} | {p['a_ms']:.4f} | {p['b_ms']:.4f} | {p['ratio']:.3f} | "
        f"{'yes' if p['host_bound'] else 'no'} |"
        for p in report["worst"]
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs=2, type=Path, metavar=("DIR_A", "DIR_B"), help="compare two finished runs")
    parser.add_argument("--work", type=Path, help="run baselines.py twice into WORK/a and WORK/b, then compare")
    parser.add_argument("--out", type=Path, help="write the comparison JSON here (default WORK/stability.json)")
    args, passthrough = parser.parse_known_args(argv)
    if (args.runs is None) == (args.work is None):
        parser.error("give --runs DIR_A DIR_B or --work DIR")
    if args.work is not None:
        run_a, run_b = args.work / "a", args.work / "b"
        script = str(Path(__file__).resolve().parent / "baselines.py")
        first = subprocess.run([sys.executable, script, "run", "--out", str(run_a), *passthrough])
        if first.returncode != 0:
            return first.returncode
        # --shapes-from overrides any selection in `passthrough`: B times exactly what A timed.
        second = subprocess.run(
            [sys.executable, script, "run", "--out", str(run_b), *passthrough, "--shapes-from", str(run_a)]
        )
        if second.returncode != 0:
            return second.returncode
        out = args.out or args.work / "stability.json"
    else:
        run_a, run_b = args.runs
        out = args.out
    report = compare_runs(run_a, run_b)
    if out:
        out.write_text(json.dumps(report, indent=1))
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
