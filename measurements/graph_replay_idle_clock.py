#!/usr/bin/env python3
"""Does an idle GPU's clock inflate a short graph replay, and does a warm-up just before it undo that?

The graph witness (atrex_mcp.evaluate.graph_witness) times one replay of K forwards with the
judge's clock. Where K is small (inputs of ~1-2 GiB leave room for 2 or 3 sets) the replay lasts
about a millisecond, and on the H200 honest replays of that length left ~0.5-1 ms more than their
forwards' time. A reading taken after the GPU idles finds its SM clock at ~345 MHz (of 1,980), so
the question is whether the replay's first milliseconds run at a clock still ramping up.

A graph of K = 2 forwards of two kinds, memory-bound (a scaled copy of 64 MiB) and compute-bound
(a 2,048-square bf16 matmul), is replayed REPS times per condition, each replay timed from before
its launch to after its synchronisation (the judge's view) and with CUDA events (device time):
* after the GPU idled for a gap (0, 2, 20, 200, 1,000 ms);
* after 200 ms of idling, then a warm-up of matmuls on all SMs for 0.5, 2 or 5 ms, synchronised
  just before the replay (what the judge can do in its own process before each replay request).
The SM clock is read through NVML just before each replay.

Confirms the cause when: replays after idle gaps of ~20 ms or more take clearly longer than
back-to-back ones and read a low SM clock, and a warm-up of a few ms brings them back.

    python3 measurements/graph_replay_idle_clock.py --out measurements/results/graph_replay_idle_clock/DATE_h200.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from measurements.bench_env import write_report  # noqa: E402

GAPS_S = (0.0, 0.002, 0.02, 0.2, 1.0)
WARMUPS_S = (0.0005, 0.002, 0.005)
REPS = 12
K = 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--reps", type=int, default=REPS)
    args = parser.parse_args()
    import torch

    from atrex_mcp.evaluate import device
    from atrex_mcp.evaluate.device import warm_clocks

    if not torch.cuda.is_available():
        print("graph_replay_idle_clock: needs a CUDA GPU", file=sys.stderr)
        return 2
    kinds = {"memory-bound": _memory_graph(), "compute-bound": _compute_graph()}
    rows: list[dict[str, Any]] = []
    for kind, graph in kinds.items():
        for gap in GAPS_S:
            rows.append(_condition(graph, kind, f"idle {gap * 1e3:g} ms", args.reps, gap, 0.0, device, warm_clocks))
        for warm in WARMUPS_S:
            name = f"idle 200 ms, warm {warm * 1e3:g} ms"
            rows.append(_condition(graph, kind, name, args.reps, 0.2, warm, device, warm_clocks))
    for row in rows:
        print(
            f"{row['kind']:14} {row['condition']:26} wall {row['wall_ms_median']:.4f} ms "
            f"device {row['device_ms_median']:.4f} ms  SM {row['sm_mhz_median']} MHz"
        )
    report = {"gpu": torch.cuda.get_device_name(0), "calls_per_graph": K, "reps": args.reps, "rows": rows}
    write_report(args.out, report)
    return 0


def _memory_graph() -> Any:
    import torch

    x = torch.randn(32 << 20, dtype=torch.bfloat16, device="cuda")  # 64 MiB
    out = torch.empty_like(x)
    return _capture(lambda: torch.mul(x, 1.0001, out=out))


def _compute_graph() -> Any:
    import torch

    a = torch.randn(2048, 2048, dtype=torch.bfloat16, device="cuda")
    c = torch.empty_like(a)
    return _capture(lambda: torch.mm(a, a, out=c))


def _capture(step: Any) -> Any:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(K):
            step()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def _condition(
    graph: Any, kind: str, name: str, reps: int, gap_s: float, warm_s: float, device: Any, warm_clocks: Any
) -> dict[str, Any]:
    import torch

    walls, devs, clocks = [], [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        time.sleep(gap_s)
        if warm_s:
            warm_clocks(warm_s)
        sm, _, _ = device.clocks_now()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e3)
        devs.append(start.elapsed_time(end))
        clocks.append(sm)
    known = [c for c in clocks if c is not None]
    return {
        "kind": kind,
        "condition": name,
        "gap_s": gap_s,
        "warm_s": warm_s,
        "wall_ms_median": statistics.median(walls),
        "wall_ms_min": min(walls),
        "device_ms_median": statistics.median(devs),
        "device_ms_min": min(devs),
        "sm_mhz_median": int(statistics.median(known)) if known else None,
        "walls_ms": walls,
        "device_ms": devs,
        "sm_mhz": clocks,
    }


if __name__ == "__main__":
    sys.exit(main())
