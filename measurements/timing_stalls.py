#!/usr/bin/env python3
"""Where do the evaluator's slow timed calls come from? The evaluator's own timing loop
(`sandbox.timing.time_calls`), in this trusted process, on the rms_norm example kernel at the
shapes whose IQR was large on the H200, repeated, under several spin settings.

    python3 measurements/timing_stalls.py --out FILE.json [--repeats 8]

Per run: median, IQR, p90 of the event times, the share of slow calls (over 1.5x the best
run's median), and how many of them were `host_late` (the host's start-event, launch and
end-event took longer than the GPU spin queued before them, so the GPU idled inside the timed
region). If slow calls are host-late and a longer spin removes them, the stalls are the host's
(scheduling, interpreter) and the spin must cover them; if not, they happen on the GPU.
Without a GPU: a dry run that builds and calls each case once.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from measurements.bench_env import interpret_without_gpu, write_report  # noqa: E402

# (token_count, hidden_size): rms_norm shapes 5, 7, 0, 4, 29 (large IQR or side-stream flags on the H200).
SHAPES = [(360, 1152), (2500, 2048), (2500, 1024), (22100, 1024), (24752, 1280)]
SPINS = {"evaluator": None, "spin_300us": 300.0, "spin_300us_nogc": 300.0}
TIMING_INPUT_BUDGET_BYTES = 4 << 30


def _model():
    spec = importlib.util.spec_from_file_location("rms_norm_example", ROOT / "examples" / "rms_norm_triton.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Model(eps=1e-6)


def _inputs(tokens: int, hidden: int, seed: int, device: str) -> dict:
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(tokens, hidden, dtype=torch.bfloat16, device=device, generator=gen) * 0.02
    w = torch.randn(hidden, dtype=torch.bfloat16, device=device, generator=gen) * 0.02 + 1.0
    return {"x": x, "weight": w}


def _summary(times: list[float], host_us: list[float], spin_us: float, slow_ms: float) -> dict:
    q = statistics.quantiles(times, n=10, method="inclusive")
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    slow = [i for i, t in enumerate(times) if t > slow_ms]
    late = [i for i, h in enumerate(host_us) if h > spin_us]
    return {
        "median_us": statistics.median(times) * 1e3,
        "iqr_us": (q3 - q1) * 1e3,
        "p90_us": q[-1] * 1e3,
        "slow_calls": len(slow),
        "host_late_calls": len(late),
        "slow_and_late": len(set(slow) & set(late)),
        "host_us_median": statistics.median(host_us),
        "host_us_max": max(host_us),
        "spin_us": spin_us,
        "calls": len(times),
    }


def run(repeats: int) -> dict:
    gpu = interpret_without_gpu()
    import torch

    from sandbox.timing import Primitives, flush_bytes_for, plan_calls, time_calls

    prims = Primitives.capture()
    device = "cuda" if gpu else "cpu"
    model = _model()
    fn = lambda inputs: model(**inputs)  # noqa: E731
    report: dict = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if gpu else "cpu (dry run)",
        "cases": {},
    }
    for tokens, hidden in SHAPES:
        name = f"rms_norm_{tokens}x{hidden}"
        input_bytes = tokens * hidden * 2 + hidden * 2
        sets = int(max(2, min(200, TIMING_INPUT_BUDGET_BYTES // input_bytes)))
        if not gpu:
            fn(_inputs(tokens, hidden, 0, device))
            report["cases"][name] = {"dry_run": "called once on CPU; nothing timed"}
            continue
        warm = _inputs(tokens, hidden, 0, device)
        fn(warm)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(warm)
        end.record()
        torch.cuda.synchronize()
        plan = plan_calls(start.elapsed_time(end))
        warmup, calls = plan.warmup, plan.calls
        flush = flush_bytes_for(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0))
        runs: dict[str, list] = {}
        for label, spin in SPINS.items():
            runs[label] = []
            for r in range(repeats):
                input_sets = [_inputs(tokens, hidden, 1000 * r + k + 1, device) for k in range(sets)]
                if label.endswith("nogc"):
                    gc.disable()
                try:
                    timed = time_calls(prims, fn, warm, input_sets, calls, warmup, flush, spin_us=spin)
                finally:
                    gc.enable()
                runs[label].append((timed.times_ms, timed.host_us, timed.spin_us))
                del input_sets
        best = min(statistics.median(t) for per in runs.values() for t, _, _ in per)
        report["cases"][name] = {
            "sets": sets,
            "calls": calls,
            "best_median_us": best * 1e3,
            "runs": {label: [_summary(t, h, s, 1.5 * best) for t, h, s in per] for label, per in runs.items()},
        }
        print(
            name,
            {label: [round(x["median_us"], 1) for x in v] for label, v in report["cases"][name]["runs"].items()},
            flush=True,
        )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args(argv)
    report = run(args.repeats)
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
