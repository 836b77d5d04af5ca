"""What does the timing loop's L2 sweep cost per timed call on the GPU: torch's sum of the 2×L2
flush buffer read as bytes (into int64) against the same buffer read as fp32 words?

    python3 measurements/flush_sweep_cost.py --out results/flush_sweep/<date>_<gpu>.json

The sweep runs before every timed call and every no-op calibration call (sandbox.timing), so its
device time is paid about 250 times a shape. Median of 50 CUDA-event timings of each, after 5
untimed; the buffer is zeroed, as the loop's is.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import torch


def sweep_us(fn, repeats: int = 50) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return sorted(times)[repeats // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.zeros(2 * l2, dtype=torch.uint8, device="cuda")
    words = flush.view(torch.float32)
    result = {
        "question": "the timing loop's L2 sweep: bytes summed into int64 against fp32 words",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "l2_bytes": l2,
        "flush_bytes": 2 * l2,
    }
    for name, fn in (("uint8_sum", flush.sum), ("fp32_sum", words.sum)):
        us = sweep_us(fn)
        result[f"{name}_us_median"] = round(us, 1)
        result[f"{name}_gb_s"] = round(2 * l2 / us / 1e3, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
