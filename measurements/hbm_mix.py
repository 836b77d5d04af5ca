#!/usr/bin/env python3
"""How fast can this GPU stream HBM for each mix of reads and writes?

The `h200-measured` profile's memory ceiling (4.26 TB/s) is a 1:1 fp32 copy, but torch.compile's
silu_and_mul (two bf16 read, one written per output element) moved 4.42 TB/s through the
evaluator on the same H200 (measured by measurements/baselines.py), scoring S 1.02–1.04
against that profile. A speed-of-light time must be a lower bound for every operator, so the
measured ceiling should be the best rate over the mixes the benchmark's operators have. This
measures read-only, 2:1, 1:1 and write-only streams, each as a PyTorch op and as a plain Triton
kernel, through the evaluator's own timing loop (`sandbox.timing.time_calls`: L2 flushed by
reading before every call, median of the per-call event times), over gigabytes of traffic a call.

    python3 measurements/hbm_mix.py --out FILE.json [--gib 2]     # GPU: one run, a few seconds
    python3 measurements/hbm_mix.py --out FILE.json               # CPU: dry run (every case built and called once)

Per case: bytes read and written a call, median ms, TB/s (bytes read + written, as the
profiles count), and the ratio to the `h200` (datasheet) and `h200-measured` ceilings.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from measurements.bench_env import interpret_without_gpu, write_report  # noqa: E402

CPU_ELEMENTS = 1 << 12
BLOCK = 4096
CALLS, WARMUP, INPUT_SETS = 30, 5, 2


def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def read_kernel(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        tl.store(partial_ptr + tl.program_id(0), tl.sum(x.to(tl.float32), axis=0))

    @triton.jit
    def mul_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        product = tl.load(a_ptr + offs, mask=mask).to(tl.float32) * tl.load(b_ptr + offs, mask=mask).to(tl.float32)
        tl.store(out_ptr + offs, product.to(tl.bfloat16), mask=mask)

    @triton.jit
    def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)

    @triton.jit
    def fill_kernel(out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.full([BLOCK], 1.0, tl.bfloat16), mask=offs < n)

    return read_kernel, mul_kernel, copy_kernel, fill_kernel


def cases(
    n: int, device: str
) -> dict[str, tuple[str, Callable[[], dict[str, Any]], Callable[[dict[str, Any]], Any], int, int]]:
    """{name: (mix, make inputs, call, bytes read, bytes written)} over n bf16 elements a stream."""
    import torch
    import triton

    read_kernel, mul_kernel, copy_kernel, fill_kernel = _kernels()
    grid = (triton.cdiv(n, BLOCK),)
    one = lambda: {"x": torch.randn(n, device=device, dtype=torch.bfloat16)}  # noqa: E731

    def two() -> dict[str, Any]:
        return {
            "a": torch.randn(n, device=device, dtype=torch.bfloat16),
            "b": torch.randn(n, device=device, dtype=torch.bfloat16),
        }

    none = lambda: {"size": torch.zeros(1, device=device)}  # noqa: E731  (the loop needs a tensor to find the device)

    def triton_read(inputs):
        partial = torch.empty(grid[0], device=device, dtype=torch.float32)
        read_kernel[grid](inputs["x"], partial, n, BLOCK=BLOCK)
        return partial

    def triton_mul(inputs):
        out = torch.empty(n, device=device, dtype=torch.bfloat16)
        mul_kernel[grid](inputs["a"], inputs["b"], out, n, BLOCK=BLOCK)
        return out

    def triton_copy(inputs):
        out = torch.empty(n, device=device, dtype=torch.bfloat16)
        copy_kernel[grid](inputs["x"], out, n, BLOCK=BLOCK)
        return out

    def triton_fill(inputs):
        out = torch.empty(n, device=device, dtype=torch.bfloat16)
        fill_kernel[grid](out, n, BLOCK=BLOCK)
        return out

    b = 2 * n  # bytes of one bf16 stream
    return {
        "read_torch_sum": ("read only", one, lambda i: i["x"].sum(dtype=torch.float32), b, 0),
        "read_triton": ("read only", one, triton_read, b, 0),
        "read2_write1_torch_mul": ("2:1", two, lambda i: torch.mul(i["a"], i["b"]), 2 * b, b),
        "read2_write1_triton": ("2:1", two, triton_mul, 2 * b, b),
        "copy_torch_clone": ("1:1", one, lambda i: i["x"].clone(), b, b),
        "copy_triton": ("1:1", one, triton_copy, b, b),
        "write_torch_ones": ("write only", none, lambda i: torch.ones(n, device=device, dtype=torch.bfloat16), 0, b),
        "write_triton": ("write only", none, triton_fill, 0, b),
    }


def _ceilings() -> dict[str, float]:
    from atrex_mcp.problemset.hardware import load_profile

    return {name: load_profile(name).hbm_bandwidth.value for name in ("h200", "h200-measured")}


def time_cases(prims, built: dict[str, tuple], flush_bytes: int, ceilings: dict[str, float]) -> dict[str, Any]:
    """Every case through the worker's timing loop: median ms, rate (bytes read + written per
    second) and its share of each ceiling; and the best case of each mix."""
    from sandbox.timing import time_calls

    timed: dict[str, Any] = {}
    for name, (mix, make, fn, read, written) in built.items():
        sets = [make() for _ in range(INPUT_SETS)]
        run = time_calls(prims, fn, make(), sets, CALLS, WARMUP, flush_bytes)
        ms = statistics.median(run.times_ms)
        rate = (read + written) / (ms * 1e-3)
        timed[name] = {
            "mix": mix,
            "bytes_read": read,
            "bytes_written": written,
            "median_ms": ms,
            "min_ms": min(run.times_ms),
            "tb_per_s": rate / 1e12,
            **{f"of_{p}": rate / c for p, c in ceilings.items()},
        }
        del sets, run
    best: dict[str, dict[str, Any]] = {}
    for name, case in timed.items():
        if case["mix"] not in best or case["tb_per_s"] > best[case["mix"]]["tb_per_s"]:
            best[case["mix"]] = {"case": name, "tb_per_s": case["tb_per_s"]}
    return {"cases": timed, "best_by_mix": best}


def measure(gib: float) -> dict[str, Any]:
    import torch

    gpu = interpret_without_gpu()
    report: dict[str, Any] = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "torch": torch.__version__}
    if not gpu:
        built = cases(CPU_ELEMENTS, "cpu")
        for _, make, fn, _, _ in built.values():
            fn(make())
        report.update(device="cpu", note="not timed: no GPU", cases=dict.fromkeys(built))
        return report
    import triton

    from sandbox.timing import Primitives, flush_bytes_for

    props = torch.cuda.get_device_properties(0)
    flush = flush_bytes_for(getattr(props, "L2_cache_size", 0))
    n = int(gib * (1 << 30)) // 2
    ceilings = _ceilings()
    report.update(
        device=props.name, triton=triton.__version__, elements=n, calls=CALLS, flush_bytes=flush, ceilings=ceilings
    )
    report.update(time_cases(Primitives.capture(), cases(n, "cuda"), flush, ceilings))
    return report


def render(report: dict[str, Any]) -> str:
    if report.get("device") == "cpu":
        return "HBM mix: dry run on CPU (not timed)."
    lines = [
        f"HBM streams on {report['device']} ({report['date']}), {report['elements']} bf16 elements a stream",
        "",
        "| case | mix | median ms | TB/s | of h200 | of h200-measured |",
        "|---|---|---|---|---|---|",
    ]
    for name, c in report["cases"].items():
        lines.append(
            f"| {name} | {c['mix']} | {c['median_ms']:.4f} | {c['tb_per_s']:.3f} | {c['of_h200']:.3f} | "
            f"{c['of_h200-measured']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gib", type=float, default=2.0, help="GiB of one bf16 stream (default 2)")
    args = parser.parse_args(argv)
    report = measure(args.gib)
    write_report(args.out, report)
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
