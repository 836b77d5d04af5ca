"""Does each batch-C reference (MoE routing and compute, causal conv, linear attention) give the
same answer on CUDA as on CPU, on identical inputs?

The references are plain fp32 torch; cuBLAS blocking, CUDA exp/softplus and reduction orders
differ from the CPU build, so a bf16 rounding or an fp8 code (fp8_blockscale_fused_moe, whose
outputs reach the e4m3fnuz maximum) may flip, and the index outputs must agree exactly. For
each operator this runs the smoke shape and one or two scored shapes small enough for the CPU,
and records the evaluator's verdict (CUDA output judged against the CPU output with
atrex_mcp.evaluate.compare), the share of elements that differ bit-wise, and whether any output
holds NaN. The full-size run of every scored shape (time, peak memory) is bench/run_references.py.

    python3 bench/refs_c_device_agreement.py [--out bench/results] [--seed 1234]

Writes refs_c_device_agreement.json (with date, GPU, torch version) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from atrex_mcp.catalog import Catalog  # noqa: E402
from atrex_mcp.evaluate.compare import compare_outputs, flatten_outputs  # noqa: E402

# op -> scored shapes whose CPU run takes seconds, not minutes
CPU_SIZED_SHAPES = {
    "moe_sum_reduce": ["6"],
    "moe_topk_gating_softmax": ["9"],
    "moe_count_and_sort": ["4"],
    "moe_align_block_size": ["6"],
    "causal_conv1d": ["6"],
    "gated_delta_rule_update": ["10"],
    "chunk_delta_rule_output": ["8"],
    "chunk_gated_delta_rule_state": ["14"],
    "fused_moe": ["0", "8"],
    "fp8_blockscale_fused_moe": ["2", "4"],  # one token each; shape 2 has hidden 7168
}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8) if t.element_size() == 1 else t


def agreement(op: str, shape, model_cls, make_inputs, seed: int) -> dict:
    inputs = make_inputs(seed=seed, device="cuda", **shape.inputs)
    with torch.no_grad():
        start = time.perf_counter()
        gpu = model_cls(**shape.init)(**inputs)
        torch.cuda.synchronize()
        gpu_s = time.perf_counter() - start
        cpu = model_cls(**shape.init)(**{k: v.cpu() for k, v in inputs.items()})
    gpu_host = {k: v.cpu() for k, v in gpu.items()} if isinstance(gpu, dict) else gpu.cpu()
    verdict = compare_outputs(cpu, gpu_host, op)
    gpu_flat, cpu_flat = flatten_outputs(gpu_host), flatten_outputs(cpu)
    differ = {
        name: (_bits(gpu_flat[name]) != _bits(ref)).double().mean().item()
        if gpu_flat[name].shape == ref.shape else "shape differs"
        for name, ref in cpu_flat.items()
    }
    nan = {name: bool(t.float().isnan().any()) for name, t in gpu_flat.items() if t.is_floating_point()}
    return {"op": op, "shape_id": shape.id, "verdict_ok": verdict.ok, "verdict": verdict.message,
            "differ_fraction": differ, "gpu_has_nan": nan, "gpu_s": round(gpu_s, 4)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    cat = Catalog()
    rows = []
    for op, shape_ids in CPU_SIZED_SHAPES.items():
        model_cls, make_inputs = cat.load_reference(op), cat.load_make_inputs(op)
        problem = cat.visible(op)
        for shape in [problem.smoke_shape, *(problem.shape(i) for i in shape_ids)]:
            try:
                row = agreement(op, shape, model_cls, make_inputs, args.seed)
            except Exception as exc:  # recorded per shape; the next shape still runs
                row = {"op": op, "shape_id": shape.id, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version(),
        "seed": args.seed,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "refs_c_device_agreement.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"\n| op | shape | verdict | differ fraction | NaN on GPU |  ({meta['gpu']}, torch {meta['torch']})")
    for r in rows:
        if "error" in r:
            print(f"| {r['op']} | {r['shape_id']} | ERROR {r['error'][:80]} | | |")
            continue
        differ = ", ".join(f"{k}: {v:.2e}" if isinstance(v, float) else f"{k}: {v}" for k, v in r["differ_fraction"].items())
        print(f"| {r['op']} | {r['shape_id']} | {'ok' if r['verdict_ok'] else r['verdict'][:80]} | {differ} | {any(r['gpu_has_nan'].values())} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
