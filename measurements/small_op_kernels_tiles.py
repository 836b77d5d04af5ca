"""How fast are the wiki kernels of the four small operators on the H200, which column tile is best
for the two chunked delta-rule stages, and is each one launch of Triton only?

    python3 measurements/small_op_kernels_tiles.py [--out measurements/results/small_op_kernels_tiles/]

Operators: moe_count_and_sort, moe_align_block_size, chunk_delta_rule_output,
chunk_gated_delta_rule_state. For a few representative scored shapes of each (inputs from the
problem's own generator, seed 0) it times the wiki kernel — and, for the delta-rule stages, each
column-block variant (BV) — with CUDA events (3 warm-up calls, median and IQR of 30 timed calls,
each call bracketed by its own events), checks every variant's output against the reference
(integers exact, floats with the judge's allclose rule), times the reference (median of 5) and,
for the state pass, a bare `clone` of the state pool (the copy every implementation must make).
One torch.profiler pass per operator lists the device kernels of one call, so the DSL share and
the launch count are visible. A variant that fails to compile or run is recorded with its error,
not fatal. Self-contained: reads problems/<op>/ and gpu_wiki/kernels/<op>.py by path, imports
only torch, triton and the evaluator's comparison. Under 3 minutes on one H200.

Writes <out>/<date>_<gpu>.json (or --out itself when it ends in .json).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from atrex_mcp.evaluate.compare import compare_outputs  # noqa: E402

WARMUP, REPS, REF_REPS = 3, 30, 5

# op -> (scored shape ids, column-block variants; None = the kernel's own tile table)
PLAN = {
    "moe_count_and_sort": (["0", "2", "4"], [None]),
    "moe_align_block_size": (["0", "3", "6"], [None]),
    "chunk_delta_rule_output": (["0", "4", "7", "13"], [None, 64, 128]),
    "chunk_gated_delta_rule_state": (["0", "12", "16", "23"], [None, 16, 32, 64]),
}


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shape(op: str, shape_id: str) -> dict:
    shapes = json.loads((ROOT / "problems" / op / "shapes.json").read_text())["shapes"]
    return next(s for s in shapes if s["id"] == shape_id)


def _time_ms(fn, reps: int, warmup: int) -> dict:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    q = statistics.quantiles(times, n=4) if len(times) >= 4 else [min(times), 0, max(times)]
    return {"median_ms": statistics.median(times), "iqr_ms": q[2] - q[0], "min_ms": min(times), "reps": reps}


def _device_kernels(fn) -> list[dict]:
    """Device kernels (name, total µs) of one call, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        device_us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if device_us and e.count:
            rows.append({"name": e.key[:120], "calls": e.count, "device_us": round(device_us, 2)})
    return sorted(rows, key=lambda r: -r["device_us"])


def _variant(op: str, kernel_mod, init: dict, x: dict, expected, column_block) -> dict:
    row: dict = {"column_block": column_block}
    try:
        model = kernel_mod.Model(**init)
        if column_block is not None:
            model.column_block = column_block
        t0 = time.time()
        got = model(**x)
        torch.cuda.synchronize()
        row["first_call_s"] = round(time.time() - t0, 2)  # includes the compile
        verdict = compare_outputs(expected, got, op)
        row["correct"] = verdict.ok
        if not verdict.ok:
            row["mismatch"] = verdict.message[:400]
        del got
        row.update(_time_ms(lambda: model(**x), REPS, WARMUP))
        if hasattr(model, "_pinned_ok"):  # moe_align_block_size: L read through pinned memory, or the fallback copy
            row["pinned_total"] = model._pinned_ok
    except Exception as exc:  # noqa: BLE001 - a config that does not compile or run is a result, not a stop
        row["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
        row["traceback_tail"] = traceback.format_exc()[-800:]
    return row


def measure_op(op: str, shape_ids: list[str], variants: list) -> dict:
    reference_mod = _module(ROOT / "problems" / op / "reference.py", f"ref_{op}")
    inputs_mod = _module(ROOT / "problems" / op / "input.py", f"inp_{op}")
    kernel_mod = _module(ROOT / "gpu_wiki" / "kernels" / f"{op}.py", f"wiki_{op}")
    entry: dict = {"shapes": []}
    for shape_id in shape_ids:
        shape = _shape(op, shape_id)
        x = inputs_mod.make_inputs(seed=0, device="cuda", **shape["inputs"])
        reference = reference_mod.Model(**shape["init"])
        expected = reference(**x)
        row = {
            "id": shape_id,
            "inputs": shape["inputs"],
            "reference": _time_ms(lambda reference=reference, x=x: reference(**x), REF_REPS, 1),
            "variants": [_variant(op, kernel_mod, shape["init"], x, expected, v) for v in variants],
        }
        if op == "chunk_gated_delta_rule_state":
            pool = x["initial_state"]
            row["pool_clone"] = _time_ms(pool.clone, 10, 2) | {"bytes": pool.numel() * pool.element_size()}
        entry["shapes"].append(row)
        del expected, x
        torch.cuda.empty_cache()
    first = _shape(op, shape_ids[-1])
    x = inputs_mod.make_inputs(seed=0, device="cuda", **first["inputs"])
    model = kernel_mod.Model(**first["init"])
    try:
        kernels = _device_kernels(lambda: model(**x))
        own = sum(
            k["device_us"]
            for k in kernels
            if k["name"].lstrip("_").startswith(("count_and_sort", "align", "chunk_output", "state_pass"))
        )
        total = sum(k["device_us"] for k in kernels)
        entry["profile"] = {"shape": shape_ids[-1], "kernels": kernels, "dsl_share": own / total if total else None}
    except Exception as exc:  # noqa: BLE001 - a profile that fails is recorded, the timings stay
        entry["profile"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return entry


def _cell(variant: dict) -> str:
    if "median_ms" not in variant:
        return f"BV={variant['column_block']}: error"
    verdict = "ok" if variant["correct"] else "WRONG"
    return f"BV={variant['column_block']}: {variant['median_ms'] * 1000:.1f} us {verdict}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "measurements" / "results" / "small_op_kernels_tiles")
    parser.add_argument("--only", default="", help="comma-separated operators (default: all four)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("small_op_kernels_tiles: needs a CUDA GPU (none visible); run it on the H200", file=sys.stderr)
        return 2
    import triton

    ops = [o for o in args.only.split(",") if o] or list(PLAN)
    unknown = sorted(set(ops) - set(PLAN))
    if unknown:
        print(f"small_op_kernels_tiles: unknown operator(s) {unknown}; choose from {sorted(PLAN)}", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name()
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    out = args.out if args.out.suffix == ".json" else args.out / f"{date}_{gpu.replace(' ', '_').lower()}.json"
    versions = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
    }
    timing = f"CUDA events per call, {WARMUP} warm-up, median of {REPS}; inputs seed 0, L2 not flushed"
    report = {
        "meta": {
            "question": "small_op_kernels_tiles",
            "date": date,
            "gpu": gpu,
            "versions": versions,
            "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
            "timing": timing,
        },
        "operators": {},
    }
    t0 = time.time()
    for op in ops:
        shape_ids, variants = PLAN[op]
        try:
            report["operators"][op] = measure_op(op, shape_ids, variants)
        except Exception as exc:  # noqa: BLE001 - one operator's failure is recorded, the others still run
            report["operators"][op] = {
                "error": f"{type(exc).__name__}: {str(exc)[:400]}",
                "traceback_tail": traceback.format_exc()[-800:],
            }
        print(f"{op}: done at {time.time() - t0:.0f} s", file=sys.stderr)
    report["meta"]["wall_s"] = round(time.time() - t0, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    for op, entry in report["operators"].items():
        for s in entry.get("shapes", []):
            print(
                f"{op:30s} shape {s['id']:>3s}  ref {s['reference']['median_ms'] * 1000:9.1f} us  | "
                + " | ".join(_cell(v) for v in s["variants"])
            )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
