"""Where a sandbox worker's fixed cost goes on a GPU machine, each variant in a fresh process:
importing torch and the DSL, creating the CUDA context, and the first torch.profiler session
(CUDA activity, as the worker's `profile` request uses it), against the second. Variants:

  plain       imports, CUDA init, session 1, session 2 (what a worker pays today)
  early       an empty profiler session before the CUDA context exists, then as `plain`
              (can a worker spawned ahead absorb the profiler's first-use cost?)
  timed_*     200 event-timed launches of a short kernel, without a profiler session before
              (`timed_none`) and after one ended (`timed_after`): does CUPTI slow later launches?

Each session profiles one small matmul and reports its wall time and the kernels it recorded
(a session that records none would make the DSL share wrong).

    python measurements/worker_start_cost.py --out measurements/results/.../worker_start_cost.json [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

_CHILD = r"""
import json, sys, time
variant = sys.argv[1]
out = {"variant": variant}
t = time.perf_counter()
import torch, triton, triton.language, torch.profiler  # what sandbox.worker imports before init
out["import_s"] = time.perf_counter() - t
A = [torch.profiler.ProfilerActivity.CUDA]

def session(work):
    t = time.perf_counter()
    with torch.profiler.profile(activities=A) as prof:
        work()
        torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    return {"s": time.perf_counter() - t, "kernels": kernels}

if variant == "early":
    out["empty_session_before_cuda"] = session(lambda: None)
t = time.perf_counter()
torch.cuda.init(); x = torch.randn(1024, 1024, device="cuda"); torch.cuda.synchronize()
out["cuda_init_s"] = time.perf_counter() - t
if variant in ("plain", "early"):
    for k in (1, 2):
        out[f"session_{k}"] = session(lambda: x @ x)
else:
    if variant == "timed_after":
        out["session_1"] = session(lambda: x @ x)
    y = torch.empty(4096, device="cuda")
    for _ in range(50):
        y.add_(1.0)
    start = [torch.cuda.Event(enable_timing=True) for _ in range(200)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(200)]
    torch.cuda._sleep(10_000_000)
    for s, e in zip(start, end):
        s.record(); y.add_(1.0); e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(start, end))
    out["launch_us_median"] = times[100]
    out["launch_us_p90"] = times[180]
print(json.dumps(out))
"""

VARIANTS = ("plain", "early", "timed_none", "timed_after")


def run_variant(variant: str) -> dict:
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CHILD, variant], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return {"variant": variant, "error": done.stderr[-2000:]}
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    reply["process_s"] = time.perf_counter() - t
    return reply


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    runs = [run_variant(v) for _ in range(args.repeats) for v in VARIANTS]
    summary = {}
    for v in VARIANTS:
        mine = [r for r in runs if r["variant"] == v and "error" not in r]
        keys = {k for r in mine for k, value in r.items() if isinstance(value, float)}
        summary[v] = {k: statistics.median(r[k] for r in mine) for k in sorted(keys)}
        for name in ("empty_session_before_cuda", "session_1", "session_2"):
            if mine and all(name in r for r in mine):
                summary[v][name + "_s"] = statistics.median(r[name]["s"] for r in mine)
                summary[v][name + "_kernels"] = [r[name]["kernels"] for r in mine]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "summary": summary, "runs": runs}, indent=1
        )
    )
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
