#!/usr/bin/env python3
"""What the output hand-over costs: a GPU output through the evaluator's own arena writer and
reader (sandbox.handoff.ArenaWriter → atrex_mcp.evaluate.transfer.OutputArena).

The correctness stage hands every seed's output from the sandboxed worker to the judge. Through
raw files in the scratch directory that costs 0.55 s per GB on the H200 (two host copies at
3-4 GB/s). Through the shared arena it is one
GPU → host DMA on the worker's side and one host → GPU DMA on the judge's, when both processes
have the arena registered with CUDA. Both ends run in this one process here (the DMA paths are
the same as across two), with the arena registered and, for comparison, left pageable.

    python3 measurements/handoff_cost.py --out FILE.json [--gib 4]   # GPU: seconds per GB
    python3 measurements/handoff_cost.py --out FILE.json             # CPU: dry run, a few MiB
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from measurements.bench_env import write_report  # noqa: E402

REPEATS = 4


def measure(nbytes: int, device: str, register: bool) -> dict:
    """Seconds of each hand-over of one `nbytes` output from `device` and back to it. The first
    includes growing the arena (the mapping, its page faults and, when `register`, its CUDA
    registration in both processes' stead); the rest reuse it, as an evaluation's seeds do."""
    import torch

    from atrex_mcp.evaluate.transfer import OutputArena
    from sandbox.handoff import ArenaWriter

    output = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=device)
    arena = OutputArena(cuda=register)
    writer = ArenaWriter(arena.fd, cuda=register)
    rows = []
    try:
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            size = arena.reserve(nbytes)
            t1 = time.perf_counter()
            manifest = writer.write(output, size)
            t2 = time.perf_counter()
            back, written = arena.load(manifest, device, max_bytes=nbytes)
            if device == "cuda":
                torch.cuda.synchronize()
            t3 = time.perf_counter()
            assert written and torch.equal(back, output)
            rows.append({"reserve_s": t1 - t0, "write_s": t2 - t1, "load_s": t3 - t2})
            del back
        registered = (arena.mapped.registered, writer.mapped.registered)
    finally:
        writer.mapped.close()
        arena.close()
    gb = nbytes / 1e9
    steady = rows[1:]
    write_s = min(r["write_s"] for r in steady)
    load_s = min(r["load_s"] for r in steady)
    return {
        "bytes": nbytes,
        "registered (judge, worker)": registered,
        "repeats": rows,
        "first_s": sum(rows[0].values()),
        "write_gb_s": gb / write_s,
        "load_gb_s": gb / load_s,
        "s_per_gb": (write_s + load_s) / gb,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gib", type=float, default=4.0, help="GiB of one output (default 4; 4 MiB without a GPU)")
    args = parser.parse_args(argv)
    import torch

    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    nbytes = int(args.gib * (1 << 30)) if gpu else 4 << 20
    rows = {"registered": measure(nbytes, device, register=True), "pageable": measure(nbytes, device, register=False)}
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0) if gpu else "cpu (dry run)",
        "repeats": REPEATS,
        "arena": rows,
    }
    write_report(args.out, report)
    for name, row in rows.items():
        print(
            f"{name}: worker's copy {row['write_gb_s']:.2f} GB/s, judge's copy {row['load_gb_s']:.2f} GB/s, "
            f"{row['s_per_gb']:.3f} s per GB; first hand-over {row['first_s']:.2f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
