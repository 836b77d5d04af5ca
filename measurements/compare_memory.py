"""GPU memory and time of the trusted side's output comparison at the largest benchmark outputs.

On the H200, comparing whole outputs in float64 runs the evaluator out of memory
(unified_attention: 12 GiB for one float64 copy; block_scaled_mm: 9 GiB), so compare_outputs
works in chunks of compare.CHUNK_ELEMENTS; this measures, per case, the GPU memory it allocates
beyond the reference output (torch.cuda.max_memory_allocated) and its wall time, with the
candidate in host memory as the evaluator loads it, and checks the planted mismatches are found.

    python3 measurements/compare_memory.py [--out measurements/results]        (needs a CUDA GPU with ~12 GiB free)

Cases: the output of unified_attention shape 19 (526 336 x 28 x 128 bf16, 3.5 GiB) and of
block_scaled_mm shape 23 (299 520 x 4096 fp32, 4.6 GiB), plus 2^30 fp8 e4m3fn codes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from atrex_mcp.evaluate.compare import CHUNK_ELEMENTS, compare_outputs  # noqa: E402

CASES = {
    "unified_attention/19": ((526336, 28, 128), torch.bfloat16),
    "block_scaled_mm/23": ((299520, 4096), torch.float32),
    "fp8 2^30 codes": ((1 << 30,), torch.float8_e4m3fn),
}
PLANTED = (17, 123_456_789, 1_000_000_007)  # flat indices made wrong in the candidate


def measure(shape: tuple[int, ...], dtype: torch.dtype) -> dict:
    ref = torch.randn(shape, device="cuda").mul_(100).to(dtype)
    cand = ref.cpu()
    flat = cand.view(-1).view(torch.uint8) if dtype.itemsize == 1 else cand.view(-1)
    for i in PLANTED:
        flat[i] = flat[i] ^ 0x40 if dtype.itemsize == 1 else flat[i] + 1000  # fp8: an exponent bit
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    verdict = compare_outputs(ref, cand, "x")
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    detail = verdict.details[0]
    return {
        "output_gib": ref.numel() * ref.element_size() / 2**30,
        "extra_peak_gib": (torch.cuda.max_memory_allocated() - before) / 2**30,
        "seconds": seconds,
        "mismatches": detail.mismatches,
        "planted": len(PLANTED),
        "first_bad_flat": PLANTED[0],
        "first_bad_index": detail.first_bad_index,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "measurements" / "results")
    args = parser.parse_args()
    results = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "chunk_elements": CHUNK_ELEMENTS,
        "cases": {},
    }
    for name, (shape, dtype) in CASES.items():
        results["cases"][name] = row = measure(shape, dtype)
        print(
            f"{name:24s} output {row['output_gib']:.2f} GiB  extra peak {row['extra_peak_gib']:.2f} GiB  "
            f"{row['seconds']:.1f} s  mismatches {row['mismatches']} (planted {row['planted']})",
            flush=True,
        )
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare_memory.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
