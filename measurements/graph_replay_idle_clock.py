#!/usr/bin/env python3
"""What makes a short graph replay, timed by another process, run ~0.7 ms long: the GPU's idle
clock, or the switch from the judge's CUDA context to the worker's?

The graph witness (atrex_mcp.evaluate.graph_witness) times, from the judge's process, a request
in which the sandboxed worker (another process with its own CUDA context) replays K forwards.
On the H200 honest replays left a nearly constant ~0.7 ms per replay more than K forwards'
time, whatever K was (2 to 102): a 2-call replay of fp8_blockscale_fused_moe shape 4 read 4-5x
its median and failed an honest kernel. Warming the clock in the judge's process just before
the request did not remove it. Two suspects remain and this separates them:

* the clock: an idle H200 reads ~345 MHz of its 1,980;
* the context switch: the judge's own GPU work (references, comparisons, a warm-up) runs in
  its context just before, and the GPU time-slices between processes' contexts.

A child process (the "worker") holds a CUDA graph of K = 2 forwards, memory-bound (a scaled copy
of 64 MiB) or compute-bound (a 2,048-square bf16 matmul), and answers requests over a pipe:
`replay` (replay, synchronise), `ping` (nothing), `gpu_ping` (one tiny kernel, synchronise) and
`warm` (2 ms of matmuls in its own context, synchronise). The parent (the "judge") times each
request from send to reply, REPS times per condition:
* back to back: replays with nothing between them;
* idle 200 ms: the parent sleeps first (no GPU work anywhere);
* judge's GPU work: the parent runs 2 ms of matmuls in its own context, synchronised, then asks;
* worker warm-up: the parent sends `warm` (untimed), then the timed replay;
* judge's GPU work, then worker warm-up, then the replay.
The device time of the replay (CUDA events in the child) comes back with each reply.

Reads: a replay after the judge's GPU work much longer than back to back, and a worker warm-up
that brings it back, point at the context switch; idle 200 ms much longer with the judge's own
warm-up not helping points the same way; idle 200 ms long but the judge's warm-up helping
points at the clock.

    python3 measurements/graph_replay_idle_clock.py --out measurements/results/graph_replay_idle_clock/DATE_h200.json
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from measurements.bench_env import write_report  # noqa: E402
from sandbox.timing import warm_clocks  # noqa: E402

REPS = 12
K = 2
WARM_S = 2e-3
CONDITIONS = (
    "back to back",
    "idle 200 ms",
    "judge's GPU work",
    "worker warm-up",
    "judge's GPU work, then worker warm-up",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--reps", type=int, default=REPS)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("graph_replay_idle_clock: needs a CUDA GPU", file=sys.stderr)
        return 2
    from atrex_mcp.evaluate import device

    rows: list[dict[str, Any]] = []
    ctx = mp.get_context("spawn")
    for kind in ("memory-bound", "compute-bound"):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, kind), daemon=True)
        proc.start()
        assert parent.recv() == "ready"
        _ask(parent, "replay")  # the graph's first replay (upload)
        for condition in CONDITIONS:
            rows.append(_condition(parent, kind, condition, args.reps, device))
        rows.append(_round_trips(parent, kind, args.reps, device))
        parent.send("exit")
        proc.join(timeout=10)
    for row in rows:
        device_ms = "—" if row["device_ms_median"] is None else f"{row['device_ms_median']:.4f} ms"
        print(
            f"{row['kind']:14} {row['condition']:40} wall {row['wall_ms_median']:.4f} ms (min {row['wall_ms_min']:.4f})"
            f"  device {device_ms}  SM before {row['sm_mhz_median']} MHz"
        )
    import triton

    report = {
        "question": "what makes a short graph replay timed by another process run long",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "calls_per_graph": K,
        "warm_s": WARM_S,
        "reps": args.reps,
    }
    write_report(args.out, {**report, "rows": rows})
    return 0


def _ask(conn: Any, command: str) -> tuple[float, float | None]:
    """(wall ms of the request as the parent saw it, the device ms the child reported)."""
    t0 = time.perf_counter()
    conn.send(command)
    device_ms = conn.recv()
    return (time.perf_counter() - t0) * 1e3, device_ms


def _condition(conn: Any, kind: str, condition: str, reps: int, device: Any) -> dict[str, Any]:
    walls, devs, clocks = [], [], []
    for _ in range(reps):
        if condition == "idle 200 ms":
            time.sleep(0.2)
        if condition.startswith("judge's GPU work"):
            time.sleep(0.05)
            warm_clocks(WARM_S)
        if condition.endswith("worker warm-up"):
            _ask(conn, "warm")
        sm, _, _ = device.clocks_now()
        wall, dev = _ask(conn, "replay")
        walls.append(wall)
        devs.append(dev)
        clocks.append(sm)
    return _row(kind, condition, walls, devs, clocks)


def _round_trips(conn: Any, kind: str, reps: int, device: Any) -> dict[str, Any]:
    """A tiny kernel's request right after the judge's GPU work: the switch alone, no forward."""
    walls, devs, clocks = [], [], []
    for _ in range(reps):
        time.sleep(0.05)
        warm_clocks(WARM_S)
        sm, _, _ = device.clocks_now()
        wall, dev = _ask(conn, "gpu_ping")
        walls.append(wall)
        devs.append(dev)
        clocks.append(sm)
    pings = [_ask(conn, "ping")[0] for _ in range(reps)]
    row = _row(kind, "gpu_ping after the judge's GPU work", walls, devs, clocks)
    row["ping_ms_min"], row["ping_ms_median"] = min(pings), statistics.median(pings)
    return row


def _row(kind: str, condition: str, walls: list[float], devs: list[Any], clocks: list[Any]) -> dict[str, Any]:
    known = [c for c in clocks if c is not None]
    timed = [d for d in devs if d is not None]  # gpu_ping reports no device time
    return {
        "kind": kind,
        "condition": condition,
        "wall_ms_median": statistics.median(walls),
        "wall_ms_min": min(walls),
        "device_ms_median": statistics.median(timed) if timed else None,
        "sm_mhz_median": int(statistics.median(known)) if known else None,
        "walls_ms": walls,
        "device_ms": devs,
        "sm_mhz": clocks,
    }


def _worker(conn: Any, kind: str) -> None:
    import torch

    if kind == "memory-bound":
        x = torch.randn(32 << 20, dtype=torch.bfloat16, device="cuda")  # 64 MiB
        out = torch.empty_like(x)

        def step() -> None:
            torch.mul(x, 1.0001, out=out)

    else:
        a = torch.randn(2048, 2048, dtype=torch.bfloat16, device="cuda")
        out = torch.empty_like(a)

        def step() -> None:
            torch.mm(a, a, out=out)

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
    tiny = torch.zeros(1, device="cuda")
    conn.send("ready")
    while True:
        command = conn.recv()
        if command == "exit":
            return
        if command == "replay":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            conn.send(start.elapsed_time(end))
        elif command == "gpu_ping":
            tiny.add_(1)
            torch.cuda.synchronize()
            conn.send(None)
        elif command == "warm":
            warm_clocks(WARM_S)
            conn.send(None)
        else:
            conn.send(None)


if __name__ == "__main__":
    sys.exit(main())
