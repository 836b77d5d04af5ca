#!/usr/bin/env python3
"""The short-kernel floor on the H200: the smallest time the evaluator's timing loop can
report for a candidate that launches one kernel, how many shapes have a T_SOL below it, and
a launch-floor-aware score reported beside S (never instead of it).

    python3 measurements/launch_floor.py measure --out FLOOR.json       # GPU (CPU: a dry run, "not timed: no GPU")
    python3 measurements/launch_floor.py score --floor FLOOR.json DIR… [--out PREFIX]

What `measure` records, each through `sandbox.timing.time_calls` (the worker's own loop:
L2 flush, events around the call, device synchronisation after it) unless said otherwise:
  events_only          nothing between the two events: the timer's own floor
  torch_one_kernel     one ATen kernel on a 1-element tensor (dispatcher + launch)
  triton_empty_kernel  one launch of an empty @triton.jit kernel (Triton's launcher + launch)
  sync_gap             what the synchronisation after a no-op adds (the loop's calibration)
  host_launch_us       host time per launch, 500 back-to-back launches (no synchronisation)
  gpu_back_to_back_us  device time per launch when 500 are queued at once (no host gap)
  host_sync_us         wall time of torch.cuda.synchronize() on an idle device
T_floor = the smaller median of torch_one_kernel and triton_empty_kernel: no correct
candidate can be timed below one launch, whatever the shape's T_SOL.

The second score, S_floor_j = max(T_SOL, T_floor) / T_cand (`atrex_mcp.evaluate.scoring.
floor_aware_score`), keeps S_j's meaning wherever T_SOL ≥ T_floor and stops a shape whose
bound is below one launch from scoring near 0 for every possible kernel; `score` reports it
per operator beside S through the evaluator's own table (`table.run_row` with `floor_ms`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from measurements.bench_env import interpret_without_gpu  # noqa: E402

PROFILES = ("h200", "h200-measured")
FLOOR_CASES = ("torch_one_kernel", "triton_empty_kernel")
BACK_TO_BACK = 500  # launches queued at once (well inside the driver's launch queue)


def shapes_below_floor(catalog, t_floor_ms: float, profiles: Sequence[str] = PROFILES) -> dict[str, dict[str, int]]:
    """{op: {"shapes": n, profile: shapes whose T_SOL is below the floor}} over scored shapes."""
    counts = {}
    for op in catalog.names():
        roofline = catalog.hidden(op).roofline.get("shapes", {})
        scored = [s.id for s in catalog.visible(op).scored_shapes]
        row = {"shapes": len(scored)}
        for profile in profiles:
            row[profile] = sum(
                1
                for sid in scored
                if (roofline.get(sid, {}).get("t_sol_ms") or {}).get(profile, float("inf")) < t_floor_ms
            )
        counts[op] = row
    return counts


def floor_scores(results: Sequence, catalog, profile: str, t_floor_ms: float) -> dict[str, Any]:
    """Per operator S_i and S_floor_i (medians over correct shapes, 0 if none), and both S_agg,
    for each baseline/candidate kind found in `results` (the evaluator's table rows)."""
    from atrex_mcp.evaluate.table import run_row

    by_kind: dict[str, list] = {}
    for r in results:
        by_kind.setdefault(r.candidate, []).append(r)
    report = {}
    for kind, kind_results in by_kind.items():
        row = run_row(kind, kind_results, catalog, profile, {}, t_floor_ms)
        report[kind] = {
            "operators": {o.op: {"s": o.score, "s_floor": o.score_floor} for o in row.per_operator},
            "s_agg": row.s_agg,
            "s_floor_agg": row.s_floor_agg,
            "missing_operators": row.missing_operators,
        }
    return report


def _stats(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    deciles = statistics.quantiles(ordered, n=10, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 9
    return {
        "median_ms": statistics.median(ordered),
        "min_ms": ordered[0],
        "p10_ms": deciles[0],
        "p90_ms": deciles[-1],
        "n": len(ordered),
    }


def _cases(device: str) -> dict[str, Any]:
    """The single-launch candidates (callables of an input dict), built for `device`. Each
    returns the tensor it wrote (its input), as the timing loop fingerprints every output."""
    import torch
    import triton

    @triton.jit
    def _empty_kernel():
        pass

    def empty_launch(inputs: dict[str, Any]) -> Any:
        _empty_kernel[(1,)]()
        return inputs["x"]

    return {
        "events_only": lambda inputs: inputs["x"],
        "torch_one_kernel": lambda inputs: inputs["x"].zero_(),
        "triton_empty_kernel": empty_launch,
        "_inputs": lambda: {"x": torch.zeros(1, device=device)},
    }


def time_cases(prims, cases: dict[str, Any], make, calls: int, flush_bytes: int) -> dict[str, dict[str, float]]:
    """Every case through `sandbox.timing.time_calls` (the worker's loop) over 8 input sets:
    per-call statistics and the loop's no-op synchronisation gap."""
    from sandbox.timing import time_calls

    timed = {}
    for name, fn in cases.items():
        sets = [make() for _ in range(8)]
        fn(sets[0])
        run = time_calls(prims, fn, make(), sets, calls, 20, flush_bytes)
        timed[name] = {**_stats(run.times_ms), "sync_gap_median_ms": statistics.median(run.noop_gap_ms)}
    return timed


def measure(calls: int = 200) -> dict[str, Any]:
    import torch

    interpret_without_gpu()

    report: dict[str, Any] = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "torch": torch.__version__}
    if not torch.cuda.is_available():
        cases = _cases("cpu")  # dry run: every case is built and called once
        inputs = cases.pop("_inputs")()
        for fn in cases.values():
            fn(inputs)
        report.update(device="cpu", floor_ms=None, note="not timed: no GPU", cases={name: None for name in cases})
        return report
    import triton

    from sandbox.timing import Primitives, flush_bytes_for

    props = torch.cuda.get_device_properties(0)
    flush = flush_bytes_for(getattr(props, "L2_cache_size", 0))
    cases = _cases("cuda")
    make = cases.pop("_inputs")
    report.update(
        device=props.name,
        triton=triton.__version__,
        calls=calls,
        flush_bytes=flush,
        cases=time_cases(Primitives.capture(), cases, make, calls, flush),
    )
    report["sync_gap_ms"] = report["cases"]["events_only"]["sync_gap_median_ms"]
    inputs = make()
    for name in FLOOR_CASES:
        fn = cases[name]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(BACK_TO_BACK):
            fn(inputs)
        host = time.perf_counter() - t0
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(100_000_000)  # ~50 ms of GPU spin: the launches queue up behind it
        start.record()
        for _ in range(BACK_TO_BACK):
            fn(inputs)
        end.record()
        torch.cuda.synchronize()
        report["cases"][name].update(
            host_launch_us=host * 1e6 / BACK_TO_BACK, gpu_back_to_back_us=start.elapsed_time(end) * 1e3 / BACK_TO_BACK
        )
    waits = []
    for _ in range(200):
        t0 = time.perf_counter()
        torch.cuda.synchronize()
        waits.append((time.perf_counter() - t0) * 1e6)
    report["host_sync_us"] = statistics.median(waits)
    report["floor_ms"] = min(report["cases"][name]["median_ms"] for name in FLOOR_CASES)
    report["floor_case"] = min(FLOOR_CASES, key=lambda name: report["cases"][name]["median_ms"])
    return report


def render_scores(floor_ms: float, counts: dict[str, dict[str, int]], scores: dict[str, dict[str, Any]]) -> str:
    lines = [
        f"T_floor = {floor_ms * 1e3:.2f} µs (one launch through the evaluator's timing loop).",
        "",
        "| operator | shapes | T_SOL < floor (h200) | T_SOL < floor (h200-measured) |",
        "|---|---|---|---|",
    ]
    lines += [f"| {op} | {c['shapes']} | {c['h200']} | {c['h200-measured']} |" for op, c in counts.items()]
    total = {k: sum(c[k] for c in counts.values()) for k in ("shapes", *PROFILES)}
    lines.append(f"| **all** | {total['shapes']} | {total['h200']} | {total['h200-measured']} |")
    for profile, by_kind in scores.items():
        for kind, block in by_kind.items():
            fmt = lambda v: "—" if v is None else f"{v:.4f}"  # noqa: E731
            lines += [
                "",
                f"### {kind} against `{profile}`: S_agg {fmt(block['s_agg'])}, S_floor_agg {fmt(block['s_floor_agg'])}",
                "",
                "| operator | S_i | S_floor_i |",
                "|---|---|---|",
            ]
            lines += [f"| {op} | {fmt(v['s'])} | {fmt(v['s_floor'])} |" for op, v in sorted(block["operators"].items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="measure the floor (GPU) and count shapes below it")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--calls", type=int, default=200)
    s = sub.add_parser("score", help="S and S_floor per operator from finished runs")
    s.add_argument("--floor", type=Path, required=True, help="JSON written by `measure`")
    s.add_argument("dirs", nargs="+", type=Path)
    s.add_argument("--out", type=Path, help="prefix for <prefix>.md and <prefix>.json")
    args = parser.parse_args(argv)

    from atrex_mcp.problemset.catalog import Catalog

    catalog = Catalog()
    if args.cmd == "measure":
        report = measure(args.calls)
        if report["floor_ms"] is not None:
            report["below_floor"] = shapes_below_floor(catalog, report["floor_ms"])
        args.out.write_text(json.dumps(report, indent=1))
        print(json.dumps({k: v for k, v in report.items() if k != "below_floor"}, indent=1))
        return 0
    floor = json.loads(args.floor.read_text())
    if floor.get("floor_ms") is None:
        print(f"no floor in {args.floor}: {floor.get('note', 'not measured')}")
        return 0
    from atrex_mcp.evaluate.table import load_results

    results = [r for d in args.dirs for r in load_results(d)]
    scores = {profile: floor_scores(results, catalog, profile, floor["floor_ms"]) for profile in PROFILES}
    counts = floor.get("below_floor") or shapes_below_floor(catalog, floor["floor_ms"])
    text = render_scores(floor["floor_ms"], counts, scores)
    if args.out:
        Path(f"{args.out}.md").write_text(text)
        Path(f"{args.out}.json").write_text(
            json.dumps({"floor_ms": floor["floor_ms"], "below_floor": counts, "scores": scores}, indent=1)
        )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
