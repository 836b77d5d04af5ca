#!/usr/bin/env python3
"""How do many agents' servers share one cluster? K MCP clients, each with a server of its own
on the same pool (what `serve --cluster` gives each agent), call `validate` at once, each on a
different operator (its wiki kernel). Measured on a local cluster of 1 worker and of N (one GPU
each), one leg after the other: per call, the latency; per GPU worker, the busy seconds and
their share of the leg's wall (GPU occupancy), from the scheduler's task stream.

On a one-GPU host the two legs are one: the report says so and gives no speed-up ("n/a (one
GPU)"). Writes OUT/<date>_<gpu>.{md,json}.

    export PYTHONPATH=$PWD            # (after bash measurements/cluster_wheels.sh on a host without Dask:
                                      #  PYTHONPATH=/tmp/atrex-cluster-site:$PWD)
    python3 measurements/cluster_server_pool.py --workers 8 --clients 8 --out /tmp/res/cluster_server_pool
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

import anyio  # noqa: E402
from mcp import Client  # noqa: E402

from atrex_mcp.cluster.engine import connect, local_cluster, require_distributed, visible_devices  # noqa: E402
from atrex_mcp.cluster.remote import ClusterPool  # noqa: E402
from atrex_mcp.errors import AtrexError  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog  # noqa: E402
from atrex_mcp.server.app import ServerConfig, build_server  # noqa: E402
from measurements.cluster_runs import (  # noqa: E402
    CPU_GPU,
    ONE_GPU,
    ONE_GPU_NOTE,
    candidate_set,
    check_shapes,
    check_workers,
    host_record,
    report_head,
    report_stem,
    table,
    worker_gpu,
)

DEFAULT_OPS = "rms_norm,silu_and_mul,l2_norm,layer_norm,fused_add_rms_norm,gated_rms_norm,moe_sum_reduce,mrope"
CALL_PREFIX = "atrex-call-"  # the task key of a server's call on the cluster (cluster.remote)


async def _calls(
    pool: ClusterPool, sources: dict[str, str], ops: list[str], shapes: list[str] | None, seeds: int, state: Path
) -> list[dict[str, Any]]:
    """Every client's one `validate`, all at once; each client has its own server and workspace."""
    results: list[dict[str, Any]] = []

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
        text = " ".join(getattr(c, "text", "") for c in answer.content)
        results.append(
            {
                "client": i,
                "op": op,
                "latency_s": round(latency, 2),
                "error": text.splitlines()[0:3] if answer.is_error else None,
                "passed": content.get("passed"),
                "failed": content.get("failed"),
            }
        )

    async with anyio.create_task_group() as tg:
        for i, op in enumerate(ops):
            tg.start_soon(agent, i, op)
    return sorted(results, key=lambda r: r["client"])


def measure_leg(
    workers: int, sources: dict[str, str], ops: list[str], shapes: list[str] | None, seeds: int
) -> dict[str, Any]:
    """One leg: a local cluster of `workers` GPUs, every client's call (client i on ops[i]) at once."""
    distributed = require_distributed()
    t0 = time.monotonic()
    with local_cluster(visible_devices(workers)) as cluster, connect(cluster.scheduler_address) as connection:
        connection.client.wait_for_workers(workers)
        names = {a: w["name"] for a, w in connection.workers().items()}
        answers = connection.client.run(worker_gpu)  # the workers' imports belong to the start, not the calls
        started = time.monotonic() - t0
        pool = ClusterPool(connection, Catalog())
        with (
            tempfile.TemporaryDirectory(prefix="atrex-pool-") as state,
            distributed.get_task_stream(client=connection.client) as stream,
        ):
            t1 = time.monotonic()
            calls = anyio.run(_calls, pool, sources, ops, shapes, seeds, Path(state))
            wall = time.monotonic() - t1
    busy = {name: 0.0 for name in names.values()}
    for task in stream.data:
        if str(task["key"]).startswith(CALL_PREFIX):
            span = sum(s["stop"] - s["start"] for s in task["startstops"] if s["action"] == "compute")
            name = names.get(task["worker"], task["worker"])
            busy[name] = busy.get(name, 0.0) + span
    latencies = [c["latency_s"] for c in calls]
    return {
        "leg": f"cluster-{workers}",
        "workers": workers,
        "gpus": {names[a]: answers[a] for a in sorted(answers, key=lambda a: names[a])},
        "cluster_start_s": round(started, 2),
        "wall_s": round(wall, 2),
        "latency_s": {
            "median": round(statistics.median(latencies), 2),
            "min": round(min(latencies), 2),
            "max": round(max(latencies), 2),
        },
        "busy_s": {w: round(s, 2) for w, s in sorted(busy.items())},
        "occupancy": {w: round(s / wall, 3) for w, s in sorted(busy.items())},
        "call_errors": sum(1 for c in calls if c["error"]),
        "calls": calls,
    }


def _comparison(legs: list[dict[str, Any]]) -> dict[str, Any]:
    if len(legs) == 1:
        return {"wall_speedup": ONE_GPU, "median_latency_ratio": ONE_GPU, "verdicts_match": None}
    one, many = legs
    same = [(c["op"], c["passed"], c["failed"]) for c in one["calls"]] == [
        (c["op"], c["passed"], c["failed"]) for c in many["calls"]
    ]
    return {
        "wall_speedup": round(one["wall_s"] / many["wall_s"], 3) if many["wall_s"] else None,
        "median_latency_ratio": (
            round(one["latency_s"]["median"] / many["latency_s"]["median"], 3) if many["latency_s"]["median"] else None
        ),
        "verdicts_match": same,
    }


def render(report: dict[str, Any]) -> str:
    rows = [
        [
            leg["leg"],
            leg["cluster_start_s"],
            leg["wall_s"],
            f"{leg['latency_s']['median']} / {leg['latency_s']['max']}",
            ", ".join(f"{w}: {v}" for w, v in leg["occupancy"].items()),
            leg["call_errors"],
        ]
        for leg in report["legs"]
    ]
    calls = [
        [leg["leg"], c["client"], c["op"], c["latency_s"], c["passed"], c["failed"], "; ".join(c["error"] or []) or "-"]
        for leg in report["legs"]
        for c in leg["calls"]
    ]
    return "\n".join(
        [
            *report_head("Many servers' validate calls on one cluster (serve --cluster)", report),
            f"{report['clients']} clients at once, each its own server; operators {', '.join(report['ops'])}; "
            f"shapes {', '.join(report['shapes'] or ['every scored shape'])}; {report['seeds']} seed(s).",
            "",
            table(["leg", "cluster start s", "wall s", "latency median / max s", "GPU occupancy", "call errors"], rows),
            "",
            f"Wall speed-up: {report['wall_speedup']}; median latency 1 over N: {report['median_latency_ratio']}"
            + (
                f"; verdicts the same on both legs: {report['verdicts_match']}"
                if report["verdicts_match"] is not None
                else ""
            )
            + "."
            + (f" {report['note']}." if report["note"] else ""),
            "",
            table(["leg", "client", "operator", "latency s", "passed", "failed", "error"], calls),
            "",
        ]
    )


def measure(
    out: Path, workers: int, clients: int, pool_ops: list[str], shapes: list[str] | None, seeds: int, command: str = ""
) -> dict[str, Any]:
    """Both legs (one with one GPU), then the report; returns it."""
    check_workers(workers)
    sources = candidate_set(pool_ops, fill_with_reference=False)
    missing = [op for op in pool_ops if op not in sources]
    if missing:
        raise AtrexError(
            "input", "no_kernel", f"No wiki kernel for {', '.join(missing)}.", "Choose operators of gpu_wiki/kernels/."
        )
    check_shapes(pool_ops, shapes or [])
    ops = [pool_ops[i % len(pool_ops)] for i in range(clients)]
    legs = [measure_leg(w, sources, ops, shapes, seeds) for w in sorted({1, workers})]
    named = list(legs[0]["gpus"].values())
    gpu = named[0]["gpu"] if named else CPU_GPU
    report = {
        **host_record(gpu),
        "question": "How do K agents' servers share one cluster's GPUs (validate calls at once, 1 vs N workers)?",
        "command": command,
        "gpus": workers,
        "note": ONE_GPU_NOTE if workers == 1 else None,
        "clients": clients,
        "ops": ops,
        "shapes": shapes,
        "seeds": seeds,
        "legs": legs,
        **_comparison(legs),
    }
    out.mkdir(parents=True, exist_ok=True)
    stem = report_stem(report["date"], gpu, workers)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / f"{stem}.md").write_text(render(report))
    report["files"] = [str(out / f"{stem}.{ext}") for ext in ("md", "json")]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/res/cluster_server_pool"), help="report folder")
    parser.add_argument("--workers", type=int, help="N: one-GPU workers of the second leg (default: every GPU)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients, each on its own operator")
    parser.add_argument("--ops", default=DEFAULT_OPS, help="operators (with a wiki kernel) the clients take in turn")
    parser.add_argument("--shapes", help="comma-separated shape ids for every call (default: every scored shape)")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.clients < 1 or args.seeds < 1:
        parser.error("--clients and --seeds must be at least 1")
    workers = args.workers if args.workers is not None else len(visible_devices(None))
    if workers == 1:
        print("[cluster-pool] one GPU: the 1-worker and N-worker legs are one leg; speed-up n/a (one GPU)")
    command = shlex.join(["python3", "measurements/cluster_server_pool.py", *(sys.argv[1:] if argv is None else argv)])
    try:
        report = measure(
            args.out,
            workers,
            args.clients,
            [o for o in args.ops.split(",") if o],
            [s for s in args.shapes.split(",") if s] if args.shapes else None,
            args.seeds,
            command,
        )
    except AtrexError as exc:
        print(f"cluster_server_pool: {exc}", file=sys.stderr)
        return 2
    for leg in report["legs"]:
        print(
            f"[cluster-pool] {report['clients']} clients on {leg['workers']} worker(s): wall {leg['wall_s']} s, "
            f"latency median {leg['latency_s']['median']} s max {leg['latency_s']['max']} s, "
            f"occupancy {leg['occupancy']}, {leg['call_errors']} call error(s)"
        )
    print(f"[cluster-pool] wall speed-up {report['wall_speedup']}")
    for path in report["files"]:
        print(f"[cluster-pool] {path}")
    failed = any(leg["call_errors"] for leg in report["legs"]) or report["verdicts_match"] is False
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
