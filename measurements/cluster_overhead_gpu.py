#!/usr/bin/env python3
"""What does judging through the cluster path cost over the local path, and are its verdicts
the same? One candidate set (default: the wiki kernels of rms_norm and silu_and_mul, every
scored shape, 1 seed) is judged twice on this host: by `bench eval` locally, then by
`bench eval --cluster` on a local cluster of ONE worker pinned to one GPU. Verdicts are
compared shape by shape; the overhead is split into the cluster's start (scheduler + worker
process) and the rest of the wall-time difference (shipping shards, the worker's own imports,
one sandbox worker start per shard instead of one per operator).

    bash measurements/cluster_wheels.sh && export PYTHONPATH=/tmp/atrex-cluster-site:$PWD
    python3 measurements/cluster_overhead_gpu.py --out measurements/results/cluster_overhead_h200

Writes OUT/result.json (walls, overhead split, per-shape time ratio cluster/local, verdict
differences) and prints a summary; exits 1 when a verdict differs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from atrex_mcp.agentbench.evaluation import EvalSettings, evaluate_run  # noqa: E402
from measurements.cluster_runs import candidate_set, differences, make_run, times, verdicts  # noqa: E402


def measure(out: Path, ops: list[str], shapes: str, seeds: int, shard_shapes: int | None, device: str) -> dict:
    from atrex_mcp.cluster.engine import local_cluster

    sources = candidate_set(ops, fill_with_reference=False)
    if out.exists():
        shutil.rmtree(out)
    local_run, cluster_run = make_run(out / "local", sources), make_run(out / "cluster", sources)
    settings = EvalSettings(shapes=shapes, seeds=seeds, baselines="no")

    t0 = time.monotonic()
    evaluate_run(local_run, settings, live=False)
    local_wall = time.monotonic() - t0

    t0 = time.monotonic()
    with local_cluster([device]) as cluster:
        started = time.monotonic() - t0
        t1 = time.monotonic()
        summary = evaluate_run(
            cluster_run, settings, live=False, cluster=cluster.scheduler_address, shard_shapes=shard_shapes
        )
        cluster_eval = time.monotonic() - t1
    cluster_wall = time.monotonic() - t0

    diffs = differences(verdicts(local_run), verdicts(cluster_run))
    local_t, cluster_t = times(local_run), times(cluster_run)
    ratios = [cluster_t[k] / local_t[k] for k in local_t if k in cluster_t and local_t[k] > 0]
    shapes_judged = sum(len(v["shapes"]) for v in verdicts(cluster_run).values())
    return {
        "ops": list(sources),
        "shapes": shapes,
        "seeds": seeds,
        "shard_shapes": shard_shapes,
        "device": device,
        "shapes_judged": shapes_judged,
        "failed": summary.failed,
        "local_wall_s": round(local_wall, 2),
        "cluster_wall_s": round(cluster_wall, 2),
        "overhead": {
            "cluster_start_s": round(started, 2),
            "judging_s": round(cluster_eval - local_wall, 2),
            "total_s": round(cluster_wall - local_wall, 2),
            "total_fraction": round((cluster_wall - local_wall) / local_wall, 3) if local_wall else None,
        },
        "time_ratio_cluster_over_local": {
            "shapes": len(ratios),
            "median": round(statistics.median(ratios), 4) if ratios else None,
            "min": round(min(ratios), 4) if ratios else None,
            "max": round(max(ratios), 4) if ratios else None,
        },
        "verdicts_identical": not diffs,
        "differences": diffs[:200],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "measurements" / "results" / "cluster_overhead")
    parser.add_argument("--ops", default="rms_norm,silu_and_mul", help="comma-separated operators with a wiki kernel")
    parser.add_argument("--shapes", default="all", help="all, smoke, or shape ids (bench eval's --shapes)")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--shard-shapes", type=int, default=None, help="shapes per shard (default: bench eval's)")
    parser.add_argument("--device", default="0", help="the GPU (CUDA_VISIBLE_DEVICES value) of the one worker")
    args = parser.parse_args(argv)
    report = measure(
        args.out, [o for o in args.ops.split(",") if o], args.shapes, args.seeds, args.shard_shapes, args.device
    )
    report["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (args.out / "result.json").write_text(json.dumps(report, indent=1))
    over = report["overhead"]
    print(
        f"[cluster-overhead] {report['shapes_judged']} shapes of {', '.join(report['ops'])}: "
        f"local {report['local_wall_s']} s, "
        f"cluster {report['cluster_wall_s']} s (start {over['cluster_start_s']} s, judging {over['judging_s']:+} s); "
        f"time ratio median {report['time_ratio_cluster_over_local']['median']}; "
        f"verdicts {'identical' if report['verdicts_identical'] else 'DIFFER: ' + '; '.join(report['differences'][:5])}"
    )
    print(f"[cluster-overhead] {args.out / 'result.json'}")
    return 0 if report["verdicts_identical"] and not report["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
