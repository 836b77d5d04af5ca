#!/usr/bin/env python3
"""How much faster are the judge's reference calls replayed as CUDA graphs, per operator, and are
they identical to eager?

For each shape of the heaviest references (gated_delta_rule_update, chunk_gated_delta_rule_state,
fused_moe, block_scaled_mm, chunk_delta_rule_output, per_token_group_quant_fp8) it makes the
reference output of `--seeds` fresh input sets twice, one seed after the other as the judge does:
eager (`Model(**init)(**inputs)`), and through `reference_graph.ReferenceGraphs` as
`Trial.reference_output` calls it on a GPU (same module key, same policy), each call timed between
synchronisations. Per shape: what the graph path decided (graph, or eager and why), the median
eager and graphed call after the first, the first graphed call (eager + warm-up + capture +
checks), whether every seed's graphed output equals eager's byte for byte, the graph's pool, and
ten references (about what the judge makes per shape) both ways: 10 eager calls against the first
graphed call and 9 replays.

Confirms the change when: `identical` holds on every row; gated_delta_rule_update's mid and long
shapes replay several times faster than eager (its reference launches ~10 kernels per token);
references that synchronise (fused_moe's `nonzero`) or are device-bound stay eager at the cost
of one eager call's measurement, and no row's ten graphed references take much longer than ten eager.

    python3 measurements/reference_graph_gpu.py --out measurements/results/reference_graph [--shapes spread]
    python3 measurements/reference_graph_gpu.py --out /tmp/refgraph --shapes smoke --seeds 3   # CPU dry run

`--shapes`: smoke (each operator's smoke shape), spread (default: four of its scored shapes, from
the smallest inputs to the largest), all. The CPU dry run drives the same path through
`RerunDevice` (no graphs: a "replay" runs the forward again) with every gate on time open, so
its times mean nothing; it checks the script and the bit-for-bit comparison. `--budget-s` stops
before a shape that would start after it (rows so far are written).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT),) if p not in sys.path]

from measurements.bench_env import interpret_without_gpu, write_report  # noqa: E402

OPS = (
    "gated_delta_rule_update",
    "chunk_gated_delta_rule_state",
    "fused_moe",
    "block_scaled_mm",
    "chunk_delta_rule_output",
    "per_token_group_quant_fp8",
)
JUDGE_REFERENCES = 10  # about what the judge makes per shape: 5 seeds, 3 timed checks, witness checks


def pick_shapes(problem: Any, which: str) -> list[Any]:
    """The shapes `which` names (smoke, spread, all) of a problem."""
    if which == "smoke":
        return [problem.smoke_shape]
    scored = sorted(problem.scored_shapes, key=lambda s: _input_size(s.inputs))
    if which == "all":
        return scored
    if which != "spread":
        raise SystemExit(f"--shapes: {which!r} is not one of smoke, spread, all")
    picks = sorted({round(i * (len(scored) - 1) / 3) for i in range(4)})
    return [scored[i] for i in picks]


def _input_size(inputs: dict[str, Any]) -> int:
    size = 1
    for value in inputs.values():
        if type(value) is int and value > 0:
            size *= value
    return size


def measure_shape(catalog: Any, op: str, shape: Any, seeds: int, cuda: bool) -> dict[str, Any]:
    """One row: the shape's references eager and graphed, seed by seed."""
    import torch

    from atrex_mcp.evaluate import reference_graph as rg

    device_name = "cuda" if cuda else "cpu"
    if cuda:
        graph_device: rg.GraphDevice = rg.CudaGraphDevice()
        graphs = rg.ReferenceGraphs(graph_device, torch.cuda.get_device_properties(0).total_memory)
    else:
        graphs = rg.ReferenceGraphs(
            rg.RerunDevice(), None, rg.GraphPolicy(min_eager_s=0.0, launch_bound_share=0.0, min_speedup=0.0)
        )
    make_inputs = catalog.load_make_inputs(op)
    model = catalog.load_reference(op)(**shape.init).to(device_name).eval()
    key = repr(sorted(shape.init.items()))  # Trial.reference_output's module key
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def timed(fn: Any) -> tuple[Any, float]:
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        return out, time.perf_counter() - t0

    eager_s: list[float] = []
    graph_s: list[float] = []
    identical = True
    row: dict[str, Any] = {"op": op, "shape": shape.id, "inputs": shape.inputs}
    try:
        with torch.no_grad():
            for seed in range(seeds):
                inputs = make_inputs(seed=seed, device=device_name, **shape.inputs)
                expected, seconds = timed(lambda inputs=inputs: model(**inputs))
                eager_s.append(seconds)
                got, seconds = timed(lambda inputs=inputs: graphs.output(shape.id, key, model, inputs))
                graph_s.append(seconds)
                identical = identical and rg.same_output(got, expected)
                del inputs, expected, got
        (decision,) = graphs.decisions.values() or [rg.Decision(rg.EAGER, "no key: inputs a graph cannot take")]
    except torch.OutOfMemoryError as exc:
        return {**row, "error": f"out of memory: {exc}"[:300]}
    finally:
        graphs.release()
        if cuda:
            torch.cuda.empty_cache()
    eager_med = statistics.median(eager_s[1:] or eager_s)
    graph_med = statistics.median(graph_s[1:] or graph_s)
    ten_eager = JUDGE_REFERENCES * eager_med
    ten_graph = graph_s[0] + (JUDGE_REFERENCES - 1) * graph_med
    return {
        **row,
        "mode": decision.mode,
        "reason": decision.reason,
        "identical": identical,
        "eager_ms": round(eager_med * 1e3, 3),
        "graph_ms": round(graph_med * 1e3, 3),
        "speedup": round(eager_med / graph_med, 2) if graph_med > 0 else None,
        "first_graph_call_ms": round(graph_s[0] * 1e3, 3),
        "first_eager_call_ms": round(eager_s[0] * 1e3, 3),
        "ten_references_eager_ms": round(ten_eager * 1e3, 2),
        "ten_references_graph_ms": round(ten_graph * 1e3, 2),
        "peak_mib": round((decision.peak_bytes or 0) / 2**20, 1),
        "pool_mib": round(decision.pool_bytes / 2**20, 1),
        "seeds": seeds,
    }


def per_op(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per operator: shapes, graphed shapes, and ten references a shape both ways, summed."""
    ops: dict[str, dict[str, Any]] = {}
    for row in rows:
        if "error" in row:
            continue
        entry = ops.setdefault(row["op"], {"op": row["op"], "shapes": 0, "graphed": 0, "eager_s": 0.0, "graph_s": 0.0})
        entry["shapes"] += 1
        entry["graphed"] += row["mode"] == "graph"
        entry["eager_s"] += row["ten_references_eager_ms"] / 1e3
        entry["graph_s"] += row["ten_references_graph_ms"] / 1e3
    for entry in ops.values():
        entry["eager_s"], entry["graph_s"] = round(entry["eager_s"], 3), round(entry["graph_s"], 3)
        entry["speedup"] = round(entry["eager_s"] / entry["graph_s"], 2) if entry["graph_s"] > 0 else None
    return list(ops.values())


def markdown(report: dict[str, Any]) -> str:
    from measurements.cluster_runs import table

    lines = [
        "# The judge's reference calls replayed as CUDA graphs",
        "",
        f"{report['date']}, {report['gpu']}, torch {report['torch']}; `{report['command']}`",
        "",
        f"All graphed outputs identical to eager: **{report['all_identical']}**",
        "",
        "## Per operator (ten references a shape, as the judge makes them)",
        "",
        table(
            ["op", "shapes", "graphed", "eager s", "graphed s", "speedup"],
            [[o["op"], o["shapes"], o["graphed"], o["eager_s"], o["graph_s"], o["speedup"]] for o in report["per_op"]],
        ),
        "",
        "## Per shape",
        "",
        table(
            ["op", "shape", "mode", "identical", "eager ms", "graph ms", "x", "first graphed ms", "pool MiB", "why"],
            [
                [r["op"], r["shape"], r.get("mode"), r.get("identical"), r.get("eager_ms"), r.get("graph_ms")]
                + [r.get("speedup"), r.get("first_graph_call_ms"), r.get("pool_mib"), r.get("reason") or r.get("error")]
                for r in report["rows"]
            ],
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the result folder: <date>_<gpu>.{json,md} are written there")
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated operators")
    parser.add_argument("--shapes", default="spread", help="smoke, spread (default) or all")
    parser.add_argument("--seeds", type=int, default=JUDGE_REFERENCES, help="input sets per shape")
    parser.add_argument("--budget-s", type=float, default=540.0, help="no shape starts after this many seconds")
    args = parser.parse_args(argv)
    cuda = interpret_without_gpu()
    import torch

    from atrex_mcp.problemset.catalog import Catalog
    from measurements.cluster_runs import CPU_GPU, report_stem

    catalog = Catalog()
    t_start = time.monotonic()
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for op in args.ops.split(","):
        for shape in pick_shapes(catalog.visible(op), args.shapes):
            if time.monotonic() - t_start > args.budget_s:
                skipped.append(f"{op}:{shape.id}")
                continue
            rows.append(measure_shape(catalog, op, shape, max(2, args.seeds), cuda))
            print(rows[-1], flush=True)
    gpu = torch.cuda.get_device_name(0) if cuda else CPU_GPU
    report: dict[str, Any] = {
        "question": "How much faster are the judge's reference calls replayed as CUDA graphs, and identical to eager?",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": gpu if cuda else f"{gpu} (dry run: no graphs, times mean nothing)",
        "torch": torch.__version__,
        "command": " ".join(["python3", "measurements/reference_graph_gpu.py", *(argv or sys.argv[1:])]),
        "all_identical": all(r.get("identical", True) for r in rows),
        "per_op": per_op(rows),
        "rows": rows,
        "skipped_over_budget": skipped,
    }
    stem = report_stem(report["date"], gpu, 1)
    write_report(Path(args.out) / f"{stem}.json", report)
    (Path(args.out) / f"{stem}.md").write_text(markdown(report))
    print(
        f"{len(rows)} shapes, {sum(r.get('mode') == 'graph' for r in rows)} graphed, "
        f"identical: {report['all_identical']}; per op: "
        + "; ".join(f"{o['op']} {o['eager_s']} s -> {o['graph_s']} s" for o in report["per_op"])
    )
    return 0 if report["all_identical"] and not any("error" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
