#!/usr/bin/env python3
"""Does it matter where the evaluation's scratch directory lives?

A candidate's outputs go from the sandboxed worker to the trusted side as raw files in the
scratch directory (`sandbox.tensor_files.TensorWriter` → `atrex_mcp.evaluate.transfer.OutputReader`),
five seeds per shape: on the H200 that cost 0.51 s per GB of output and seed (2026-11-30), the
largest per-shape cost of the eager set after the calls themselves. The scratch directory is a
`tempfile` directory: on the device machine /tmp is ext4 on a virtual disk, /dev/shm a tmpfs.
This writes and reads GPU tensors through both, with the evaluator's own writer and reader.

    python3 bench/scratch_transfer.py --out FILE.json [--gib 4] [--dirs /tmp,/dev/shm]   # GPU, seconds
    python3 bench/scratch_transfer.py --out FILE.json                                    # CPU: dry run, a few MiB
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "bench")) if p not in sys.path]

from bench_env import write_report  # noqa: E402

REPEATS = 3


def measure(directory: Path, nbytes: int, device: str) -> dict[str, float]:
    """Median seconds to write one output of `nbytes` from `device` and read it back, over REPEATS."""
    import torch

    from atrex_mcp.evaluate.transfer import OutputReader
    from sandbox.tensor_files import IO_DIR, TensorWriter

    output = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=device)
    writes, reads = [], []
    with tempfile.TemporaryDirectory(prefix="atrex-transfer-", dir=directory) as tmp:
        scratch = Path(tmp)
        (scratch / IO_DIR).mkdir()
        writer, reader = TensorWriter(scratch / IO_DIR), OutputReader(scratch, pinned=device == "cuda")
        for k in range(REPEATS):
            stem = f"{k:08x}"
            t0 = time.perf_counter()
            manifest = writer.write(output, stem)
            t1 = time.perf_counter()
            back = reader.load(stem, manifest, "cpu", max_bytes=nbytes)
            t2 = time.perf_counter()
            writes.append(t1 - t0)
            reads.append(t2 - t1)
            assert back.numel() == nbytes
    gb = nbytes / 1e9
    write_s, read_s = statistics.median(writes), statistics.median(reads)
    return {"bytes": nbytes, "write_s": write_s, "read_s": read_s, "write_gb_s": gb / write_s, "read_gb_s": gb / read_s,
            "s_per_gb": (write_s + read_s) / gb}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gib", type=float, default=4.0, help="GiB of one output (default 4; 4 MiB without a GPU)")
    parser.add_argument("--dirs", default=f"{tempfile.gettempdir()},/dev/shm", help="directories to compare")
    args = parser.parse_args(argv)
    import torch

    gpu = torch.cuda.is_available()
    nbytes = int(args.gib * (1 << 30)) if gpu else 4 << 20
    rows = {}
    for directory in (Path(d) for d in args.dirs.split(",") if d):
        rows[str(directory)] = measure(directory, nbytes, "cuda" if gpu else "cpu") if directory.is_dir() else "missing"
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name(0) if gpu else "cpu (dry run)", "repeats": REPEATS, "dirs": rows}
    write_report(args.out, report)
    for directory, row in rows.items():
        if isinstance(row, dict):
            print(f"{directory}: write {row['write_gb_s']:.2f} GB/s, read {row['read_gb_s']:.2f} GB/s, "
                  f"{row['s_per_gb']:.3f} s per GB written and read")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
