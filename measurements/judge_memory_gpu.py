"""Does the judge hold GPU memory across operators, and where was it allocated?

Judges a list of operators (their eager references, or the wiki's kernels) one after another
through `atrex-mcp bench eval`'s local path (`evaluation.evaluate_run`, all in this one judge
process, as `judge_throughput_gpu.py --set` does) and reads the judge's own GPU memory:

* at every shape end (after `Trial.evaluate_shape`, whose `finally` drops the shape's reference
  graphs) and at every operator end (after `evaluate` returns), with no garbage collection first:
  memory_allocated, memory_reserved, `reference_graph.pooled_bytes()`, the device's used memory,
  and from the allocator's segments the largest wholly free one (what empty_cache can hand
  back), the largest one holding a live block, the free bytes inside segments that hold a live
  block (what no empty_cache can hand back), the bytes of CUDA-graph private pools, and the
  allocator's retry and out-of-memory counts;
* at each operator end again after `gc.collect()`, and again after `torch.cuda.empty_cache()`,
  with a probe of whether empty_cache still hands anything back in this process (a fresh block
  allocated, freed and emptied: reserved memory must drop by it);
* per shape, what became of its reference graphs (`ReferenceGraphs.decisions`: graph, or eager
  and why, "not capturable" being a capture that failed), and any failed capture of the graph
  witness's fingerprint calibration;
* with `torch.cuda.memory._record_memory_history` on (state only, Python stacks), the first time
  in an operator that allocated or reserved memory reaches `--threshold-gib`, the live blocks
  and the segments grouped by the innermost frame of this checkout (atrex_mcp/, sandbox/,
  problems/, measurements/) that allocated them, and the reserved bytes by pool.

Before the judging, two child processes answer the mechanism's question on a 256 MiB block: does
a CUDA-graph capture that fails on a host synchronisation (as a reference with `.item()`,
`.tolist()` or `nonzero` does) leave this torch's caching allocator unable to hand its cached
blocks back (`plain`), and does ending the capture's pool routing put that right (`repaired`,
where `sandbox.gpu_cache.end_failed_capture` exists)?

    python3 measurements/judge_memory_gpu.py --out DIR [--ops a,b,c] [--set eager|wiki] [--seeds 2]
        [--shapes all|smoke|ids] [--threshold-gib 16] [--budget-s 420] [--history on|off] [--probe on|off]
        [--release-check on|off] [--end-failed-captures on|off]

`--end-failed-captures off` runs the judge without its clean-up of a failed capture
(`sandbox.gpu_cache.end_failed_capture` replaced by nothing for the run): the judge as it was
before, for a before-and-after in one tree.

Writes DIR/<date>_<gpu>.{json,md} and prints one summary line. No time or S of any shape is
written. Without a GPU (TRITON_INTERPRET=1) it is a dry run of the same path: the hooks fire, the
GPU figures are empty and there is no probe.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from measurements.bench_env import interpret_without_gpu  # noqa: E402

GPU = interpret_without_gpu()

import atrex_mcp.evaluate as evaluate_package  # noqa: E402
from atrex_mcp.agentbench.evaluation import EvalSettings, evaluate_run  # noqa: E402
from atrex_mcp.evaluate import EvalRequest, evaluator, graph_witness, reference_graph  # noqa: E402
from atrex_mcp.evaluate.models import EvalResult  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog  # noqa: E402
from measurements.cluster_runs import (  # noqa: E402
    CPU_GPU,
    candidate_set,
    host_record,
    make_run,
    report_head,
    report_stem,
    table,
    within_budget,
)

GIB = 1 << 30
MIB = 1 << 20
# The eager references from fp8_dynamic_per_token_quant to l2_norm grew the judge's reserved memory from
# 7 to 102 GiB in one process on the H200 (fused_moe, whose reference calls nonzero, in the middle).
DEFAULT_OPS = (
    "fp8_dynamic_per_token_quant,fused_add_rms_norm,fused_moe,fused_qk_rmsnorm,fused_qkv_rope,"
    "fused_rmsnorm_quant,gated_delta_rule_update,gated_rms_norm,l2_norm"
)
OUR_DIRS = ("/atrex_mcp/", "/sandbox/", "/problems/", "/measurements/")
TOP_SITES = 8
PROBE_BYTES = 256 * MIB + 6 * MIB  # an oversize block (>= gpu_cache.SPLIT_LIMIT_MB) of a size nothing else asks for
FIGURES = (  # the reading's byte figures, in the order the tables show them
    "allocated",
    "reserved",
    "pooled",
    "largest_free_segment",
    "largest_live_segment",
    "free_in_live_segments",
    "private_pools",
)


class Device(Protocol):
    """What a reading needs of the GPU: the seam the CPU tests replace."""

    def figures(self) -> dict[str, Any]: ...

    def snapshot(self) -> dict[str, Any] | None: ...

    def empty_cache(self) -> None: ...

    def release_works(self) -> bool | None: ...


class NoDevice:
    """The CPU dry run: no figures, no snapshot."""

    def figures(self) -> dict[str, Any]:
        return {}

    def snapshot(self) -> dict[str, Any] | None:
        return None

    def empty_cache(self) -> None:
        pass

    def release_works(self) -> bool | None:
        return None


def segment_figures(segments: list[dict[str, Any]]) -> dict[str, int]:
    """From the allocator's segments: the largest wholly free one, the largest holding a live
    block, the free bytes inside segments that hold a live block, and the private pools' bytes."""
    free = [s["total_size"] for s in segments if not s.get("active_size")]
    live = [s for s in segments if s.get("active_size")]
    return {
        "largest_free_segment": max(free, default=0),
        "largest_live_segment": max((s["total_size"] for s in live), default=0),
        "free_in_live_segments": sum(s["total_size"] - s["active_size"] for s in live),
        "private_pools": sum(s["total_size"] for s in segments if tuple(s.get("segment_pool_id") or (0, 0)) != (0, 0)),
        "segments": len(segments),
    }


class CudaDevice:
    """The judge process's own CUDA memory (torch's caching allocator) and the device's."""

    def __init__(self, history: bool):
        import torch

        self.torch = torch
        self.history = False
        if history:
            try:
                torch.cuda.memory._record_memory_history(enabled="state", context="state", stacks="python")
                self.history = True
            except (RuntimeError, TypeError, ValueError):
                self.history = False

    def figures(self) -> dict[str, Any]:
        cuda = self.torch.cuda
        if not cuda.is_initialized():
            return {}
        free, total = cuda.mem_get_info()
        stats = cuda.memory_stats()
        return {
            "allocated": cuda.memory_allocated(),
            "reserved": cuda.memory_reserved(),
            "pooled": reference_graph.pooled_bytes(),
            "device_used": total - free,
            "alloc_retries": stats.get("num_alloc_retries", 0),
            "ooms": stats.get("num_ooms", 0),
            **segment_figures(cuda.memory_snapshot()),
        }

    def snapshot(self) -> dict[str, Any] | None:
        return self.torch.cuda.memory._snapshot() if self.history else None

    def empty_cache(self) -> None:
        if self.torch.cuda.is_initialized():
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()

    def release_works(self) -> bool | None:
        """Whether empty_cache hands a freshly freed block back in this process now."""
        cuda = self.torch.cuda
        if not cuda.is_initialized():
            return None
        try:
            block = self.torch.empty(PROBE_BYTES, dtype=self.torch.uint8, device="cuda")
        except self.torch.OutOfMemoryError:  # the GPU is full: no answer, and the run goes on
            return None
        del block
        before = cuda.memory_reserved()
        self.empty_cache()
        return cuda.memory_reserved() <= before - PROBE_BYTES


def _site(frames: list[dict[str, Any]] | None) -> str:
    """The innermost two frames of this checkout, as file:line (function), innermost first."""
    ours = [f for f in frames or [] if any(d in str(f.get("filename", "")) for d in OUR_DIRS)]
    if not ours:
        return "outside this checkout" if frames else "no stack recorded"
    parts = []
    for f in ours[:2]:
        name = str(f["filename"])
        short = name[max(name.rfind(d) for d in OUR_DIRS if d in name) + 1 :]
        parts.append(f"{short}:{f.get('line')} ({f.get('name')})")
    return " < ".join(parts)


def summarise_snapshot(snapshot: dict[str, Any], top: int = TOP_SITES) -> dict[str, Any]:
    """Live blocks and segments grouped by the site that allocated them, and bytes by pool."""
    live: Counter[str] = Counter()
    segments: Counter[str] = Counter()
    free_by_site: Counter[str] = Counter()
    pools: Counter[str] = Counter()
    for seg in snapshot.get("segments", []):
        blocks = seg.get("blocks", [])
        for block in blocks:
            if block.get("state") == "active_allocated":
                live[_site(block.get("frames"))] += block["size"]
        framed = [b for b in blocks if b.get("frames")]
        where = _site(seg.get("frames") or (max(framed, key=lambda b: b["size"])["frames"] if framed else None))
        segments[where] += seg["total_size"]
        free_by_site[where] += seg["total_size"] - seg.get("active_size", 0)
        pool = tuple(seg.get("segment_pool_id") or (0, 0))
        pools["general" if pool == (0, 0) else f"private {pool}"] += seg["total_size"]

    def gib(counter: Counter[str]) -> list[list[Any]]:
        return [[site, round(n / GIB, 3)] for site, n in counter.most_common(top)]

    return {
        "live_blocks_by_site_gib": gib(live),
        "segments_by_site_gib": [[s, g, round(free_by_site[s] / GIB, 3)] for s, g in gib(segments)],
        "reserved_by_pool_gib": gib(pools),
    }


class Recorder:
    """The readings of one run, taken by wrappers installed around the judge's steps."""

    def __init__(self, device: Device, threshold_bytes: int, deadline: float, release_check: bool = True):
        self.device, self.threshold, self.deadline = device, threshold_bytes, deadline
        self.release_check = release_check
        self.op = "?"
        self.t0 = time.monotonic()
        self.readings: list[dict[str, Any]] = []
        self.graphs: list[list[str]] = []  # the reference-graph decisions of the shape in progress
        self.fingerprint_failures: list[str] = []
        self.snapshots: dict[str, dict[str, Any]] = {}

    def read(self, where: str, **extra: Any) -> dict[str, Any]:
        reading = {"where": where, "op": self.op, "t_s": round(time.monotonic() - self.t0, 2), **extra}
        try:
            reading.update(self.device.figures())
        except RuntimeError as exc:  # a reading must not end the judging it watches
            reading["reading_error"] = f"{type(exc).__name__}: {exc}"[:200]
        self.readings.append(reading)
        big = max(reading.get("allocated", 0), reading.get("reserved", 0)) >= self.threshold
        if big and self.op not in self.snapshots:
            try:
                snap = self.device.snapshot()
            except RuntimeError as exc:
                snap, self.snapshots[self.op] = None, {"at": where, "error": str(exc)[:200]}
            if snap is not None:
                self.snapshots[self.op] = {"at": where, "shape": extra.get("shape"), **summarise_snapshot(snap)}
        return reading

    def note_graphs(self, graphs: Any) -> None:
        for decision in graphs.decisions.values():
            self.graphs.append([decision.mode, decision.reason[:160]])

    def shape_done(self, shape_id: str, result: Any) -> None:
        graphs, self.graphs = self.graphs, []
        failures, self.fingerprint_failures = self.fingerprint_failures, []
        verdict = "correct" if result is not None and result.correct else getattr(result, "category", None) or "error"
        self.read("shape_end", shape=shape_id, verdict=verdict, graphs=graphs, fingerprint_capture_failures=failures)

    def operator_done(self) -> None:
        self.read("operator_end")
        gc.collect()
        self.read("operator_end_gc")
        if self.release_check:
            self.device.empty_cache()
            self.read("operator_end_emptied", empty_cache_releases=self.device.release_works())

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The wrappers around the run, the originals back after it (a test process goes on)."""
        trial, graphs = evaluator.Trial, reference_graph.ReferenceGraphs
        saved = [
            (evaluate_package, "evaluate", evaluate_package.evaluate),
            (trial, "evaluate_shape", trial.evaluate_shape),
            (graphs, "release", graphs.release),
            (graph_witness, "_graph_fingerprints_s", graph_witness._graph_fingerprints_s),
        ]
        run_one, judge_shape, release, fingerprints = (original for _, _, original in saved)

        def evaluate(request: EvalRequest, *args: Any, **kwargs: Any) -> EvalResult:
            self.op = request.op
            request = within_budget(request, self.deadline, "run it again")
            try:
                return run_one(request, *args, **kwargs)
            finally:
                self.operator_done()

        def evaluate_shape(this: Any, session: Any, shape: Any, index: int) -> Any:
            result = None
            try:
                result = judge_shape(this, session, shape, index)
                return result
            finally:
                self.shape_done(shape.id, result)

        def noted_release(this: Any) -> None:
            self.note_graphs(this)
            release(this)

        def noted_fingerprints(outputs: Any) -> float:
            try:
                return fingerprints(outputs)
            except Exception as exc:
                self.fingerprint_failures.append(f"{type(exc).__name__}: {exc}"[:160])
                raise

        evaluate_package.evaluate = evaluate
        trial.evaluate_shape = evaluate_shape  # type: ignore[method-assign]
        graphs.release = noted_release  # type: ignore[method-assign]
        graph_witness._graph_fingerprints_s = noted_fingerprints
        try:
            yield
        finally:
            for owner, attribute, original in saved:
                setattr(owner, attribute, original)


def operator_rows(readings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per operator, in judging order: its shapes, verdicts, failed captures, the most the judge
    reserved at a shape end, and its figures at the operator end (as left, after gc, emptied)."""
    by_op: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in readings:
        by_op[r["op"]].append(r)
    rows = []
    for op, found in by_op.items():
        shapes = [r for r in found if r["where"] == "shape_end"]
        ends = {r["where"]: r for r in found if r["where"].startswith("operator_end")}
        failed = [why for r in shapes for mode, why in r.get("graphs", []) if why.startswith("not capturable")]
        failed += [why for r in shapes for why in r.get("fingerprint_capture_failures", [])]
        first_failure = next(
            (r["shape"] for r in shapes if any(w.startswith("not capturable") for _, w in r.get("graphs", []))), None
        )
        row: dict[str, Any] = {
            "op": op,
            "shapes": len(shapes),
            "verdicts": dict(Counter(r["verdict"] for r in shapes)),
            "failed_captures": len(failed),
            "first_failed_capture_shape": first_failure,
            "failed_capture_reasons": sorted(set(failed))[:3],
            "graphed_shapes": sum(any(m == reference_graph.GRAPH for m, _ in r.get("graphs", [])) for r in shapes),
            "shape_end_reserved_max": max((r["reserved"] for r in shapes if "reserved" in r), default=None),
        }
        for where, reading in ends.items():
            row[where] = {k: reading.get(k) for k in (*FIGURES, "alloc_retries", "ooms") if k in reading}
            if "empty_cache_releases" in reading:
                row["empty_cache_releases"] = reading["empty_cache_releases"]
        rows.append(row)
    return rows


def verdict(rows: list[dict[str, Any]]) -> str:
    """One sentence: whether memory the judge could not hand back grew across operators, and the
    first operator whose empty_cache released nothing, against the first failed capture."""
    left = [(r["op"], r.get("operator_end_emptied", {}).get("reserved")) for r in rows]
    left = [(op, n) for op, n in left if n is not None]
    if not left:
        return "no GPU figures (a dry run)"
    stuck = next((r["op"] for r in rows if r.get("empty_cache_releases") is False), None)
    captured = next((r["op"] for r in rows if r["failed_captures"]), None)
    trail = ", ".join(f"{op} {n / GIB:.2f}" for op, n in left)
    return (
        f"reserved GiB left after gc and empty_cache at each operator end: {trail}; "
        f"first operator after which empty_cache handed nothing back: {stuck or 'none'}; "
        f"first operator with a failed CUDA-graph capture: {captured or 'none'}"
    )


def _gib(n: Any) -> Any:
    return None if n is None else round(n / GIB, 2)


def markdown(found: dict[str, Any]) -> str:
    rows = found["operators"]
    lines = report_head("Does the judge hold GPU memory across operators, and where was it allocated?", found)
    lines += [
        f"The judge's clean-up of failed captures (gpu_cache.end_failed_capture): {found.get('end_failed_captures')}",
        "",
    ]
    probe = found.get("capture_probe")
    if probe:
        lines += [f"Failed-capture probe (child processes): {json.dumps(probe)}", ""]
    lines += [
        f"**{found['verdict']}**",
        "",
        "Per operator (GiB; `end`: as the evaluation left it, `gc`: after gc.collect, `emptied`: after "
        "empty_cache; `free in live segs`: free bytes in segments a live block pins):",
        "",
    ]
    header = ["operator", "shapes", "verdicts", "failed captures", "graphed shapes", "max reserved at a shape end"]
    header += [f"{w} {k}" for w in ("end", "gc", "emptied") for k in ("allocated", "reserved")]
    header += ["emptied pooled", "emptied largest free seg", "emptied free in live segs", "emptied private pools",
               "empty_cache releases", "alloc retries", "ooms"]  # fmt: skip
    body = []
    for r in rows:
        ends = [r.get(f"operator_end{s}", {}) for s in ("", "_gc", "_emptied")]
        emptied = ends[2]
        body.append(
            [r["op"], r["shapes"], r["verdicts"], r["failed_captures"], r["graphed_shapes"],
             _gib(r["shape_end_reserved_max"]), *(_gib(e.get(k)) for e in ends for k in ("allocated", "reserved")),
             *(_gib(emptied.get(k)) for k in ("pooled", "largest_free_segment", "free_in_live_segments",
                                              "private_pools")),
             r.get("empty_cache_releases"), emptied.get("alloc_retries"), emptied.get("ooms")]
        )  # fmt: skip
    lines += [table(header, body), ""]
    reasons = [[r["op"], r["first_failed_capture_shape"], "; ".join(r["failed_capture_reasons"])] for r in rows
               if r["failed_captures"]]  # fmt: skip
    if reasons:
        lines += ["Failed captures (reference graphs, fingerprint calibration):", "",
                  table(["operator", "first at shape", "reasons"], reasons), ""]  # fmt: skip
    for op, snap in found["snapshots"].items():
        if "error" in snap:
            lines += [f"Where {op}'s memory was allocated: no snapshot ({snap['error']})", ""]
            continue
        lines += [
            f"Where {op}'s memory was allocated (first reading at or above {found['threshold_gib']} GiB: "
            f"{snap['at']}, shape {snap['shape']}); by pool: {snap['reserved_by_pool_gib']}",
            "",
            table(["live blocks: site", "GiB"], snap["live_blocks_by_site_gib"]),
            "",
            table(["segments: site", "GiB", "of it free"], snap["segments_by_site_gib"]),
            "",
        ]
    shapes = [r for r in found["readings"] if r["where"] == "shape_end"]
    lines += [
        "Every shape end (GiB, no gc before the reading):",
        "",
        table(
            ["operator", "shape", "verdict", "allocated", "reserved", "pooled", "free in live segs", "graphs"],
            [[r["op"], r["shape"], r["verdict"], _gib(r.get("allocated")), _gib(r.get("reserved")),
              _gib(r.get("pooled")), _gib(r.get("free_in_live_segments")),
              ", ".join(m for m, _ in r.get("graphs", []))] for r in shapes],
        ),
        "",
    ]  # fmt: skip
    return "\n".join(lines)


def capture_probe_child(mode: str) -> dict[str, Any]:
    """In a fresh process: a cached block, a capture that fails on a host synchronisation, another
    block cached, then empty_cache. `released`: whether the cache went back to the driver.
    `repaired`: the capture's pool routing ended by sandbox.gpu_cache.end_failed_capture first."""
    import torch

    from sandbox import gpu_cache

    gpu_cache.limit_block_splitting()
    torch.empty(PROBE_BYTES, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_reserved()
    x = torch.ones(1024, device="cuda")
    graph, pool, stream = torch.cuda.CUDAGraph(), torch.cuda.graph_pool_handle(), torch.cuda.current_stream()
    failure = None
    try:
        with torch.cuda.graph(graph, pool=pool, stream=torch.cuda.Stream(), capture_error_mode="thread_local"):
            float(x.sum().item())
    except Exception as exc:  # noqa: BLE001 - the failure is what the probe makes
        failure = f"{type(exc).__name__}: {exc}"[:200]
    torch.cuda.set_stream(stream)
    repair: Any = None
    if mode == "repaired":
        end = getattr(gpu_cache, "end_failed_capture", None)
        repair = "not in this tree" if end is None else end(pool)
    graph.reset()
    torch.cuda.synchronize()
    torch.empty(PROBE_BYTES + 2 * MIB, dtype=torch.uint8, device="cuda")  # freed at once: a cached block
    cached = torch.cuda.memory_reserved() - base
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    left = torch.cuda.memory_reserved() - base
    return {
        "capture_failed": failure,
        "repair": repair,
        "cached_mib": round(cached / MIB, 1),
        "after_empty_cache_mib": round(left / MIB, 1),
        "released": left <= cached - PROBE_BYTES,
    }


def capture_probe(timeout_s: float = 120.0) -> dict[str, Any]:
    """capture_probe_child in two fresh processes, plain and repaired."""
    found = {}
    for mode in ("plain", "repaired"):
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--capture-probe-child", mode],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                cwd=ROOT,
            )
            lines = done.stdout.strip().splitlines()
            found[mode] = json.loads(lines[-1]) if lines else {"error": done.stderr[-400:]}
        except subprocess.TimeoutExpired:
            found[mode] = {"error": f"no answer in {timeout_s:.0f} s"}
    return found


@contextlib.contextmanager
def failed_captures_ended(on: bool) -> Iterator[str]:
    """The judge's clean-up of a failed capture in torch's allocator, as it is ("on"), or replaced
    by nothing for the run ("off": the judge as before it); "not in this tree" where there is none."""
    from sandbox import gpu_cache

    original = getattr(gpu_cache, "end_failed_capture", None)
    if original is None:
        yield "not in this tree"
        return
    if on:
        yield "on"
        return
    gpu_cache.end_failed_capture = lambda pool: False
    try:
        yield "off"
    finally:
        gpu_cache.end_failed_capture = original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", default=DEFAULT_OPS, help="comma-separated operators, judged in this order, or all")
    parser.add_argument("--set", choices=("eager", "wiki"), default="eager", help="references or wiki kernels")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--shapes", default="all", help="all, smoke or shape ids (a CPU dry run: smoke)")
    parser.add_argument("--threshold-gib", type=float, default=16.0, help="allocation sites recorded from here")
    parser.add_argument("--budget-s", type=float, default=420.0, help="no evaluation starts after this")
    parser.add_argument("--history", choices=("on", "off"), default="on", help="record allocation stacks")
    parser.add_argument("--probe", choices=("on", "off"), default="on", help="the failed-capture probe first")
    parser.add_argument("--release-check", choices=("on", "off"), default="on",
                        help="gc.collect and empty_cache at each operator end, and read again")  # fmt: skip
    parser.add_argument(
        "--end-failed-captures",
        choices=("on", "off"),
        default="on",
        help="off: the judge leaves torch's allocator as a failed capture left it (gpu_cache.end_failed_capture)",
    )
    parser.add_argument("--out", type=Path, help="directory for the report")
    parser.add_argument("--capture-probe-child", choices=("plain", "repaired"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.capture_probe_child:
        print(json.dumps(capture_probe_child(args.capture_probe_child)), flush=True)
        os._exit(0)  # no teardown: an allocator a failed capture left behind may abort in it
    if args.out is None:
        parser.error("--out is required")
    started = time.monotonic()
    catalog = Catalog()
    ops = catalog.names() if args.ops == "all" else [op.strip() for op in args.ops.split(",") if op.strip()]
    unknown = [op for op in ops if op not in catalog.names()]
    if unknown:
        parser.error(f"unknown operator(s) {', '.join(unknown)}; choose among {', '.join(catalog.names())}")
    if args.set == "eager":
        sources = {op: catalog.visible(op).reference_source for op in ops}
    else:
        sources = candidate_set(ops, fill_with_reference=False)
        missing = [op for op in ops if op not in sources]
        if missing:
            parser.error(f"no wiki kernel for {', '.join(missing)} (gpu_wiki/kernels/<op>.py); choose others")
    found: dict[str, Any] = {}
    if GPU and args.probe == "on":
        found["capture_probe"] = capture_probe()
    device: Device = CudaDevice(args.history == "on") if GPU else NoDevice()
    recorder = Recorder(device, int(args.threshold_gib * GIB), started + args.budget_s, args.release_check == "on")
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="atrex-judge-memory-"))
        stack.enter_context(recorder.installed())
        ending = stack.enter_context(failed_captures_ended(args.end_failed_captures == "on"))
        make_run(Path(tmp) / "run", sources)
        evaluate_run(
            Path(tmp) / "run",
            EvalSettings(shapes=args.shapes, seeds=args.seeds, baselines="no"),
            stream=sys.stderr,
            live=False,
        )
        judged = [op for op in ops if (Path(tmp) / "run" / "eval" / f"{op}.json").is_file()]
    rows = operator_rows(recorder.readings)
    import torch

    gpu = torch.cuda.get_device_name(0) if GPU else CPU_GPU
    found = {
        **host_record(gpu),
        "gpus": 1,
        "command": "python3 " + " ".join(sys.argv),
        "set": args.set,
        "ops": ops,
        "not_judged": [op for op in ops if op not in judged],
        "seeds": args.seeds,
        "threshold_gib": args.threshold_gib,
        "end_failed_captures": ending,
        "history": getattr(device, "history", False),
        "wall_s": round(time.monotonic() - started, 1),
        **found,
        "verdict": verdict(rows),
        "operators": rows,
        "snapshots": recorder.snapshots,
        "readings": recorder.readings,
    }
    stem = report_stem(found["date"], gpu, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(found, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(found) + "\n")
    print(f"judge_memory: {len(judged)} of {len(ops)} operators in {found['wall_s']} s; {found['verdict']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
