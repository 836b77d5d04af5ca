#!/usr/bin/env python3
"""Does judging scale with GPUs? On an N-GPU host the same candidate set (default: the wiki
kernels, each operator without one judged with its own reference, so all scored shapes; 5
seeds) is judged through `bench eval --cluster` on a local cluster of 1 worker and of N
workers, one GPU each. Per phase: the judging wall time, each GPU's busy share (its workers'
judging seconds over the phase's wall), and at the end the speed-up at N GPUs (target >= 0.9 N)
and whether the verdicts match the one-GPU run shape by shape.

A phase may take longer than one command may run: `--send-for S` stops sending shards after S
seconds (those in flight finish), and running the same phase again continues where it stopped
(the shards already judged are not sent again); each call's wall time is added to the phase.

    bash measurements/cluster_wheels.sh && export PYTHONPATH=/tmp/atrex-cluster-site:$PWD
    python3 measurements/cluster_scaling.py --workers 1 --send-for 500      # again until "complete"
    python3 measurements/cluster_scaling.py --workers N --send-for 500      # N = the host's GPUs
    python3 measurements/cluster_scaling.py --report                        # OUT/scaling.json

With N = 1 only the one-worker phase exists; the report says no scaling was measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

import distributed  # noqa: E402

from atrex_mcp.agentbench.evaluation import EvalSettings, evaluate_run  # noqa: E402
from atrex_mcp.cluster.engine import local_cluster, visible_devices  # noqa: E402
from measurements.cluster_runs import busy_seconds, candidate_set, differences, make_run, verdicts  # noqa: E402

PHASE_FILE = "phase.json"
TARGET_EFFICIENCY = 0.9


def phase_dir(out: Path, workers: int) -> Path:
    return out / f"workers-{workers}"


def run_phase(
    out: Path,
    workers: int,
    ops: list[str] | None,
    shapes: str,
    seeds: int,
    shard_shapes: int | None,
    send_for: float | None,
) -> dict:
    """One call of a phase: the run made on the first call, judged (or continued) on a local
    cluster of `workers` GPUs; the call appended to OUT/workers-W/phase.json."""
    folder = phase_dir(out, workers)
    devices = visible_devices(workers)
    if len(devices) < workers:
        raise SystemExit(f"cluster_scaling: --workers {workers} but only {len(devices)} GPU(s) visible ({devices})")
    run_dir = folder / "run"
    if not run_dir.exists():
        make_run(run_dir, candidate_set(ops))
    phase_file = folder / PHASE_FILE
    phase = (
        json.loads(phase_file.read_text())
        if phase_file.is_file()
        else {"workers": workers, "devices": devices, "calls": []}
    )
    t0 = time.monotonic()
    with local_cluster(devices) as cluster:
        with distributed.Client(cluster) as client:  # the workers' imports belong to the start, not to the judging
            client.run(_import_judge)
        started = time.monotonic() - t0
        t1 = time.monotonic()
        summary = evaluate_run(
            run_dir,
            EvalSettings(shapes=shapes, seeds=seeds, baselines="no"),
            live=False,
            cluster=cluster.scheduler_address,
            shard_shapes=shard_shapes,
            send_until=None if send_for is None else t1 + send_for,
        )
        judging = time.monotonic() - t1
    phase["calls"].append(
        {
            "cluster_start_s": round(started, 2),
            "judging_s": round(judging, 2),
            "evaluated": summary.evaluated,
            "failed": summary.failed,
            "unsent": len(summary.unsent),
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    phase["complete"] = not summary.unsent
    phase_file.write_text(json.dumps(phase, indent=1))
    return phase


def _import_judge() -> None:
    import atrex_mcp.cluster.shards
    import atrex_mcp.evaluate.evaluator  # noqa: F401


def phase_summary(out: Path, workers: int) -> dict | None:
    folder = phase_dir(out, workers)
    if not (folder / PHASE_FILE).is_file():
        return None
    phase = json.loads((folder / PHASE_FILE).read_text())
    wall = sum(c["judging_s"] for c in phase["calls"])
    busy = busy_seconds(folder / "run")
    return {
        "workers": workers,
        "devices": phase["devices"],
        "complete": phase["complete"],
        "calls": len(phase["calls"]),
        "judging_wall_s": round(wall, 2),
        "cluster_start_s": [c["cluster_start_s"] for c in phase["calls"]],
        "busy_s": {w: round(s, 2) for w, s in sorted(busy.items())},
        "busy_share": {w: round(s / wall, 3) for w, s in sorted(busy.items())} if wall else {},
        "shapes_judged": sum(len(v["shapes"]) for v in verdicts(folder / "run").values()),
        "failed": sorted({op for c in phase["calls"] for op in c["failed"]}),
    }


def report(out: Path) -> dict:
    phases = sorted(int(p.name.split("-")[1]) for p in out.glob("workers-*") if (p / PHASE_FILE).is_file())
    if 1 not in phases:
        raise SystemExit("cluster_scaling: run the one-worker phase first (--workers 1)")
    one = phase_summary(out, 1)
    result: dict = {
        "phases": [phase_summary(out, w) for w in phases],
        "target_efficiency": TARGET_EFFICIENCY,
        "gpu": os.environ.get("ATREX_GPU_KIND", ""),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    many = max(phases)
    if many == 1:
        result["note"] = "one GPU only: no scaling measured"
        return result
    multi = phase_summary(out, many)
    diffs = differences(verdicts(phase_dir(out, 1) / "run"), verdicts(phase_dir(out, many) / "run"))
    speedup = one["judging_wall_s"] / multi["judging_wall_s"] if multi["judging_wall_s"] else None
    result.update(
        {
            "gpus": many,
            "speedup": round(speedup, 3) if speedup else None,
            "efficiency": round(speedup / many, 3) if speedup else None,
            "meets_target": bool(
                speedup and speedup >= TARGET_EFFICIENCY * many and one["complete"] and multi["complete"]
            ),
            "verdicts_identical": not diffs,
            "differences": diffs[:200],
        }
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "measurements" / "results" / "cluster_scaling")
    parser.add_argument("--workers", type=int, help="run (or continue) the phase with this many one-GPU workers")
    parser.add_argument("--report", action="store_true", help="compare the phases run so far (OUT/scaling.json)")
    parser.add_argument("--ops", help="comma-separated operators (default: every operator of the problem set)")
    parser.add_argument("--shapes", default="all", help="all, smoke, or shape ids (bench eval's --shapes)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--shard-shapes", type=int, default=None, help="shapes per shard (default: bench eval's)")
    parser.add_argument(
        "--send-for", type=float, help="stop sending shards after this many seconds (continue with another call)"
    )
    args = parser.parse_args(argv)
    if args.workers is None and not args.report:
        parser.error("give --workers W (a phase) or --report")
    if args.workers is not None:
        phase = run_phase(
            args.out,
            args.workers,
            args.ops.split(",") if args.ops else None,
            args.shapes,
            args.seeds,
            args.shard_shapes,
            args.send_for,
        )
        done = phase_summary(args.out, args.workers)
        print(
            f"[cluster-scaling] {args.workers} worker(s): "
            f"{'complete' if phase['complete'] else 'NOT complete (run again)'}; "
            f"{done['shapes_judged']} shapes judged, "
            f"judging wall {done['judging_wall_s']} s over {done['calls']} call(s), "
            f"busy share {done['busy_share']}"
        )
    if args.report:
        result = report(args.out)
        (args.out / "scaling.json").write_text(json.dumps(result, indent=1))
        print(f"[cluster-scaling] {json.dumps({k: v for k, v in result.items() if k != 'phases'})}")
        print(f"[cluster-scaling] {args.out / 'scaling.json'}")
        return 0 if result.get("verdicts_identical", True) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
