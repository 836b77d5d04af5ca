#!/usr/bin/env python3
"""How do many agents' servers share one cluster? K MCP clients, each with a server of its own
on the same pool (`serve --cluster`), call `validate` at once, each on a different operator
(the wiki kernel, its scored shapes). Per call: latency; per GPU worker: busy seconds and share
of the wall (GPU occupancy), from the scheduler's task stream. Run once with 1 worker and once
with N to see the calls spread.

    bash measurements/cluster_wheels.sh && export PYTHONPATH=/tmp/atrex-cluster-site:$PWD
    python3 measurements/cluster_server_pool.py --workers 1 --clients 8 --out measurements/results/cluster_pool_h200
    python3 measurements/cluster_server_pool.py --workers N --clients 8 --out measurements/results/cluster_pool_h200

Writes OUT/pool-W.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

import anyio  # noqa: E402
import distributed  # noqa: E402
from mcp import Client  # noqa: E402

from atrex_mcp.cluster.engine import connect, local_cluster, visible_devices  # noqa: E402
from atrex_mcp.cluster.remote import ClusterPool  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog  # noqa: E402
from atrex_mcp.server.app import ServerConfig, build_server  # noqa: E402
from measurements.cluster_runs import candidate_set  # noqa: E402

DEFAULT_OPS = "rms_norm,silu_and_mul,l2_norm,layer_norm,fused_add_rms_norm,gated_rms_norm,moe_sum_reduce,mrope"


async def _calls(pool: ClusterPool, ops: list[str], shapes: list[str] | None, seeds: int, state: Path) -> list[dict]:
    sources = candidate_set(ops, fill_with_reference=False)
    results: list[dict] = []

    async def agent(i: int, op: str) -> None:
        workspace = state / f"agent{i}"
        workspace.mkdir(parents=True)
        config = ServerConfig(mode="benchmark", state_dir=workspace / "state", workspaces=[workspace], cluster=pool)
        async with Client(build_server(config)) as client:
            t0 = time.monotonic()
            args = {"op": op, "source": sources[op], "seeds": seeds, **({"shapes": shapes} if shapes else {})}
            answer = await client.call_tool("validate", args)
            latency = time.monotonic() - t0
        content = answer.structured_content or {}
        results.append(
            {
                "client": i,
                "op": op,
                "latency_s": round(latency, 2),
                "error": answer.is_error,
                "passed": content.get("passed"),
                "failed": content.get("failed"),
            }
        )

    async with anyio.create_task_group() as tg:
        for i, op in enumerate(ops):
            tg.start_soon(agent, i, op)
    return sorted(results, key=lambda r: r["client"])


def measure(workers: int, ops: list[str], shapes: list[str] | None, seeds: int) -> dict:
    devices = visible_devices(workers)
    with local_cluster(devices) as cluster, connect(cluster.scheduler_address) as connection:
        pool = ClusterPool(connection, Catalog())
        with (
            tempfile.TemporaryDirectory(prefix="atrex-pool-") as state,
            distributed.get_task_stream(client=connection.client) as stream,
        ):
            t0 = time.monotonic()
            calls = anyio.run(_calls, pool, ops, shapes, seeds, Path(state))
            wall = time.monotonic() - t0
        names = {a: w["name"] for a, w in connection.workers().items()}
    busy: dict[str, float] = {}
    for task in stream.data:
        if str(task["key"]).startswith("atrex-call-"):
            span = sum(s["stop"] - s["start"] for s in task["startstops"] if s["action"] == "compute")
            name = names.get(task["worker"], task["worker"])
            busy[name] = busy.get(name, 0.0) + span
    latencies = [c["latency_s"] for c in calls]
    return {
        "workers": workers,
        "devices": devices,
        "clients": len(ops),
        "wall_s": round(wall, 2),
        "calls": calls,
        "latency_s": {"median": round(statistics.median(latencies), 2), "max": round(max(latencies), 2)},
        "busy_s": {w: round(s, 2) for w, s in sorted(busy.items())},
        "occupancy": {w: round(s / wall, 3) for w, s in sorted(busy.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "measurements" / "results" / "cluster_pool")
    parser.add_argument("--workers", type=int, default=1, help="one-GPU workers of the local cluster")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients, each on its own operator")
    parser.add_argument("--ops", default=DEFAULT_OPS, help="operators (with a wiki kernel) the clients take in turn")
    parser.add_argument("--shapes", help="comma-separated shape ids for every call (default: every scored shape)")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    pool_ops = [o for o in args.ops.split(",") if o]
    ops = [pool_ops[i % len(pool_ops)] for i in range(args.clients)]
    report = measure(args.workers, ops, args.shapes.split(",") if args.shapes else None, args.seeds)
    report["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"pool-{args.workers}.json"
    path.write_text(json.dumps(report, indent=1))
    errors = [c for c in report["calls"] if c["error"]]
    print(
        f"[cluster-pool] {report['clients']} clients on {args.workers} worker(s): wall {report['wall_s']} s, latency "
        f"median {report['latency_s']['median']} s max {report['latency_s']['max']} s, "
        f"occupancy {report['occupancy']}, "
        f"{len(errors)} call error(s)"
    )
    print(f"[cluster-pool] {path}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
