#!/usr/bin/env python3
"""`bench run` → `bench eval` → `bench report` on a GPU machine with the scripted agent, so the
report's timed columns (S, S_agg, vs eager, vs torch.compile, DSL adoption) and the two S
figures are exercised on real measurements, not only "n/a" as on CPU.

    python3 measurements/bench_scripted_gpu.py [--ops rms_norm,silu_and_mul,l2_norm,fused_add_rms_norm,layer_norm]
                                        [--shapes 0,1,2,3] [--seeds 5] [--out measurements/results/bench_scripted_gpu]

The scripted agent (examples/bench_scripted_agent.py) packages the wiki's validated kernel of
each operator through the benchmark-mode server; the trusted evaluation then times it and the
eager / torch.compile references on the chosen shapes. Writes, under --out: the run directory
(run/), the report (run/report/: report.md, report.html, report.json, PNG figures) and
conditions.json (GPU, driver, versions, wall time of each step). Takes a few minutes with the
defaults (5 operators × 4 shapes × candidate + two baselines).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def step(argv: list[str]) -> float:
    print("$", " ".join(argv), flush=True)
    started = time.monotonic()
    subprocess.run(argv, cwd=ROOT, check=True)
    return round(time.monotonic() - started, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", default="rms_norm,silu_and_mul,l2_norm,fused_add_rms_norm,layer_norm")
    parser.add_argument("--shapes", default="0,1,2,3", help="shape ids judged for every operator (or all)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "measurements" / "results" / "bench_scripted_gpu")
    args = parser.parse_args()

    import torch

    run_dir = args.out / "run"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    args.out.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "atrex_mcp.cli", "bench"]
    agent = (
        f"{sys.executable} {ROOT / 'examples' / 'bench_scripted_agent.py'} --kernels {ROOT / 'gpu_wiki' / 'kernels'}"
    )
    seconds = {
        "run": step(
            cli
            + [
                "run",
                "--agent",
                agent,
                "--ops",
                args.ops,
                "--budget-minutes",
                "10",
                "--plain",
                "--agent-uid",
                "same",
                "--out",
                str(run_dir),
            ]
        ),
        "eval": step(
            cli
            + [
                "eval",
                str(run_dir),
                "--shapes",
                args.shapes,
                "--seeds",
                str(args.seeds),
                "--baselines",
                "yes",
                "--plain",
            ]
        ),
        "report": step(cli + ["report", str(run_dir)]),
    }
    conditions = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "ops": args.ops.split(","),
        "shapes": args.shapes,
        "seeds": args.seeds,
        "seconds": seconds,
    }
    try:
        import triton

        conditions["triton"] = triton.__version__
    except ImportError:
        conditions["triton"] = None
    (args.out / "conditions.json").write_text(json.dumps(conditions, indent=1) + "\n")
    print((run_dir / "report" / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
