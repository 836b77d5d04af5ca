#!/usr/bin/env python3
"""What does compare_outputs cost per call on the GPU, the torch rule against the one-pass kernel
(atrex_mcp.evaluate.compare_kernel), for outputs of the sizes the operators produce, and do the
two give the same verdict and figures?

For each dtype and output size it builds a reference on the GPU and two candidates in turn:
`close` (every element within the tolerance: the verdict is ok) and `wrong` (the same with 0.1 %
of the elements off, and NaN/±inf planted agreeing and not). Each candidate is judged by both
paths (`compare.compare_outputs(one_pass=False / True)`, the chunk size the judge uses), once
untimed (the kernel's compilation) and then `--calls` times between synchronisations; the median
and minimum per call are reported, with the kernel's rate (bytes read: the reference twice, for
the RMS and the rule, and the candidate once) and, apart, the RMS pre-pass alone (kernel and the
exact addition of its block sums on the host). `agree` is whether the two paths' CompareResult
are equal (verdict, message, every figure).

dtype `fp8` is a quantiser's output (per_token_group_quant_fp8): e4m3fn codes of the given size
and their fp32 scales, one per 128 codes, judged as one (codes, scales) output by the fp8 code
rule and the allclose rule. Its `close` candidate has 0.5 % of the codes one step off (under the
tolerated 1 %: it passes, judged by the far-only tally) and `wrong` adds 0.1 % of codes eight
steps off and NaN on one side or both; `fp8_near` has 2 % one step off (fails: every off code
counts).

Confirms the kernel when: `agree` is true in every row; at 512 MiB and 2 GiB the kernel is a
small fraction of the torch rule's time (the torch rule took 33-59 ms a call on the judge's
large outputs) and reads near the HBM's rate; for fp8 at 2 and 6 GiB, a few ms a call against the
torch rule's hundreds (it took 0.67 s a call over the judge's quantiser outputs of up to ~6 GiB).

    python3 measurements/compare_cost_gpu.py --out measurements/results/compare_cost/DATE_h200.json
    python3 measurements/compare_cost_gpu.py --dtypes fp8 --sizes 2048,6144 --calls 3 \
        --out measurements/results/compare_cost/DATE_h200_fp8.json
    python3 measurements/compare_cost_gpu.py --out /tmp/c.json --sizes 0.01 --calls 1   # CPU dry run
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

from measurements.bench_env import interpret_without_gpu, kernel_report_head, write_report  # noqa: E402

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8": "float8_e4m3fn"}
FP8_GROUP = 128  # codes per fp32 scale, as per_token_group_quant_fp8's


def _sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def per_call(calls: int, cuda: bool, judge: Any, *args: Any, **kwargs: Any) -> tuple[dict[str, float], Any]:
    """(median and minimum ms of `calls` calls of judge(*args, **kwargs) after an untimed one,
    the last call's result)."""
    result = judge(*args, **kwargs)
    times = []
    for _ in range(calls):
        _sync(cuda)
        t0 = time.perf_counter()
        result = judge(*args, **kwargs)
        _sync(cuda)
        times.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(times), "min_ms": min(times)}, result


def candidates(ref: Any, seed: int):
    """Yield ('close', cand) then ('wrong', the same tensor spoiled in place): one extra output in memory."""
    import torch

    gen = torch.Generator(device=ref.device).manual_seed(seed)
    cand = torch.empty_like(ref)
    step = 1 << 24  # the noise drawn in slices: no fp32 copy of a whole 2 GiB output
    flat, ref_flat = cand.view(-1), ref.view(-1)
    for i in range(0, ref.numel(), step):
        r = ref_flat[i : i + step].float()
        noise = torch.rand(r.shape, generator=gen, device=ref.device).sub_(0.5).mul_(1e-3)
        flat[i : i + step] = r.mul_(noise.add_(1)).to(ref.dtype)
    yield "close", cand
    n = ref.numel()
    wrong = torch.randint(0, n, (max(n // 1000, 1),), generator=gen, device=ref.device)
    flat[wrong] = ref_flat[wrong] * 3 + 1
    for i, value in zip((n // 7, n // 5, n // 3, n - 1), (float("nan"), float("inf"), -float("inf"), float("nan"))):
        flat[i] = value
    ref_flat[n // 5] = float("inf")  # agreeing
    yield "wrong", cand


def fp8_output(mib: float, device: str, seed: int):
    """A quantiser's reference output, (e4m3fn codes of `mib` MiB spanning the format's range,
    fp32 scales), and its candidates in turn: ('close', 'fp8_near', 'wrong') as the module says,
    each a spoiled copy of the codes (one extra output in memory) with the reference's scales."""
    import torch

    n = max(int(mib * 2**20), 1)
    gen = torch.Generator(device=device).manual_seed(seed)
    codes = torch.empty(n, dtype=torch.float8_e4m3fn, device=device)
    for i in range(0, n, 1 << 24):
        x = torch.randn(min(1 << 24, n - i), generator=gen, device=device).mul_(100).clamp_(-448, 448)
        codes[i : i + (1 << 24)] = x.to(torch.float8_e4m3fn)
    scales = torch.rand(max(n // FP8_GROUP, 1), generator=gen, device=device).add_(0.01)
    ref_bytes = codes.view(torch.uint8)

    def moved(share: float, steps: int) -> Any:
        """The codes with `share` of them `steps` positions further from zero (nearer where the
        format's largest finite code is in the way): never onto NaN."""
        cand = codes.clone()
        flat = cand.view(torch.uint8)
        at = torch.randint(0, n, (max(int(n * share), 1),), generator=gen, device=device)
        picked = flat[at]
        flat[at] = torch.where((picked & 0x7F) < 0x7E - steps, picked + steps, picked - steps)
        return cand

    yield "close", (codes, scales), (moved(0.005, 1), scales)
    yield "fp8_near", (codes, scales), (moved(0.02, 1), scales)
    cand = moved(0.005, 1)
    flat = cand.view(torch.uint8)
    far = torch.randint(0, n, (max(n // 1000, 1),), generator=gen, device=device)
    flat[far] = torch.where((ref_bytes[far] & 0x7F) < 0x70, ref_bytes[far] + 8, ref_bytes[far] - 8)
    for i in (n // 7, n // 5, n - 1):  # NaN in the candidate (at n // 5 in the reference too)
        flat[i] = 0x7F
    ref_bytes[n // 5] = 0xFF  # NaN on both sides (agreeing)
    ref_bytes[n // 3] = 0x7F  # NaN in the reference only
    yield "wrong", (codes, scales), (cand, scales)


def float_output(dtype_name: str, mib: float, device: str):
    """A random reference of `mib` MiB and its candidates in turn ('close', 'wrong')."""
    import torch

    dtype = getattr(torch, DTYPES[dtype_name])
    n = max(int(mib * 2**20) // dtype.itemsize, 1)
    ref = torch.empty(n, dtype=dtype, device=device)
    gen = torch.Generator(device=device).manual_seed(1)
    for i in range(0, n, 1 << 24):
        ref[i : i + (1 << 24)] = torch.randn(min(1 << 24, n - i), generator=gen, device=device).to(dtype)
    for case, cand in candidates(ref, seed=2):
        yield case, ref, cand


def measure(dtype_name: str, mib: float, calls: int, chunk: int, device: str) -> list[dict[str, Any]]:
    from atrex_mcp.evaluate.compare import _rms, compare_outputs
    from atrex_mcp.evaluate.compare_kernel import square_sums

    cuda = device == "cuda"
    fp8 = dtype_name == "fp8"
    outputs = fp8_output(mib, device, seed=1) if fp8 else float_output(dtype_name, mib, device)
    rows = []
    for case, ref, cand in outputs:
        torch_cost, torch_result = per_call(calls, cuda, compare_outputs, ref, cand, "x", chunk=chunk, one_pass=False)
        kernel_cost, kernel_result = per_call(calls, cuda, compare_outputs, ref, cand, "x", chunk=chunk, one_pass=True)
        # the RMS pre-pass of the allclose rule: the fp8 output's scales', the float output's own
        rms_cost, _ = per_call(calls, cuda, lambda r: _rms(*square_sums(r)), ref[1] if fp8 else ref)
        judged = ref[0] if fp8 else ref
        nbytes = judged.numel() * judged.element_size()
        # bytes the one pass reads: each side once (the codes), or the reference twice (RMS and rule)
        # and the candidate once; plus the scales that way for fp8
        read = 2 * nbytes + 3 * ref[1].numel() * 4 if fp8 else 3 * nbytes
        detail = kernel_result.details[0]  # the codes ('out[0]') for fp8
        row = {
            "dtype": dtype_name,
            "mib": nbytes / 2**20,
            "elements": judged.numel(),
            "case": case,
            "chunk": chunk,
            "torch": torch_cost,
            "one_pass": kernel_cost,
            "rms_pre_pass": rms_cost,
            "speedup": torch_cost["median_ms"] / kernel_cost["median_ms"],
            "one_pass_gb_per_s": read / (kernel_cost["median_ms"] * 1e-3) / 1e9,
            "agree": torch_result == kernel_result,
            "ok": kernel_result.ok,
            "mismatches": detail.mismatches,
            "nonfinite_mismatches": detail.nonfinite_mismatches,
            "max_abs_error": detail.max_abs_error,
            "max_rel_error": detail.max_rel_error,
            "first_bad_index": detail.first_bad_index,
        }
        if not row["agree"]:
            row["torch_details"] = [d.model_dump() for d in torch_result.details]
            row["one_pass_details"] = [d.model_dump() for d in kernel_result.details]
        rows.append(row)
        print(
            f"{dtype_name} {row['mib']:8.2f} MiB {case:8s}: torch {torch_cost['median_ms']:8.2f} ms, one pass "
            f"{kernel_cost['median_ms']:7.2f} ms ({row['speedup']:.1f}x, {row['one_pass_gb_per_s']:.0f} GB/s; "
            f"RMS pre-pass {rms_cost['median_ms']:.2f} ms); ok {row['ok']}, mismatches {row['mismatches']}, "
            f"agree {row['agree']}",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the result JSON")
    parser.add_argument("--sizes", default="1,64,512,2048", help="output sizes in MiB, comma-separated")
    parser.add_argument("--dtypes", default="bf16,fp32", help=f"comma-separated, of {sorted(DTYPES)}")
    parser.add_argument("--calls", type=int, default=5, help="timed calls per path (after one untimed)")
    parser.add_argument("--chunk", type=int, default=None, help="elements per chunk (default: the judge's)")
    args = parser.parse_args(argv)
    cuda = interpret_without_gpu()
    import torch

    from atrex_mcp.evaluate.compare import CHUNK_ELEMENTS

    chunk = args.chunk or CHUNK_ELEMENTS
    rows = []
    for dtype_name in args.dtypes.split(","):
        for mib in map(float, args.sizes.split(",")):
            rows += measure(dtype_name, mib, args.calls, chunk, "cuda" if cuda else "cpu")
            if cuda:
                torch.cuda.empty_cache()
    report = {
        **kernel_report_head("compare_outputs per call on the GPU: the torch rule against the one-pass kernel", cuda),
        "rows": rows,
    }
    write_report(args.out, report)
    return 0 if all(r["agree"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
