"""Does each batch-B reference give the same answer on CUDA as on CPU, on identical inputs?

The batch-B references (gating, top-k, KV-cache scatter, rotary embeddings, block-scaled fp8
GEMM, attention) are written in plain fp32 torch; cuBLAS GEMM blocking, CUDA sin/cos/exp and
reduction orders differ from the CPU build, so bf16/fp16 roundings may flip. This runs each
reference on the GPU and on the CPU at its smoke shape and at one scored shape small enough for
the CPU, and records the evaluator's verdict (CUDA output judged against the CPU output with
atrex_mcp.evaluate.compare) plus the largest absolute and relative differences. Copies and
index outputs must agree exactly.

    python3 bench/refs_b_device_agreement.py [--out bench/results] [--seed 1234]

Writes refs_b_device_agreement.json (with date, GPU, torch version) and prints a table. The
full-size run of every scored shape (time, peak memory) is bench/run_references.py.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from atrex_mcp.catalog import Catalog  # noqa: E402
from atrex_mcp.evaluate.compare import compare_outputs, flatten_outputs  # noqa: E402

# op -> scored shapes whose CPU run takes seconds, not minutes
CPU_SIZED_SHAPES = {
    "linear_sigmoid_mul": ["6"],
    "topk_filter": ["1", "3"],
    "reshape_and_cache": ["4"],
    "fused_qkv_rope": ["0", "2"],
    "mrope": ["3"],
    "block_scaled_mm": ["0"],
    "attention_forward": ["11", "13", "20"],
    "paged_attention_decode": ["0", "4"],
    "unified_attention": ["4", "16"],
    "mla_decode_attention": ["2"],
}


def _differences(gpu: torch.Tensor, cpu: torch.Tensor) -> dict:
    g, c = gpu.cpu().double(), cpu.double()
    finite = torch.isfinite(c)
    abs_err = (g - c).abs()[finite]
    return {
        "dtype": str(cpu.dtype).removeprefix("torch."),
        "numel": cpu.numel(),
        "bitwise_equal": bool(torch.equal(gpu.cpu().view(-1).view(torch.uint8), cpu.contiguous().view(-1).view(torch.uint8))),
        "max_abs": abs_err.max().item() if abs_err.numel() else 0.0,
        "max_rel": (abs_err / c[finite].abs().clamp_min(1e-6)).max().item() if abs_err.numel() else 0.0,
    }


def _to_cpu(out):
    """A device output moved to the CPU, keeping its container (tensor, tuple or dict)."""
    if isinstance(out, dict):
        return {k: v.cpu() for k, v in out.items()}
    if isinstance(out, tuple):
        return tuple(v.cpu() for v in out)
    return out.cpu()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cuda", help="the device compared with the CPU ('cpu' is a dry run)")
    args = ap.parse_args()
    cat = Catalog()
    rows = []
    for op, shape_ids in CPU_SIZED_SHAPES.items():
        Model, make_inputs = cat.load_reference(op), cat.load_make_inputs(op)
        problem = cat.visible(op)
        for shape in (problem.smoke_shape, *(problem.shape(s) for s in shape_ids)):
            inputs = make_inputs(seed=args.seed, device=args.device, **shape.inputs)
            with torch.no_grad():
                gpu = Model(**shape.init)(**inputs)
                cpu = Model(**shape.init)(**{k: v.cpu() for k, v in inputs.items()})
            verdict = compare_outputs(cpu, _to_cpu(gpu), op)
            for name, c in flatten_outputs(cpu).items():
                row = {"op": op, "shape_id": shape.id, "output": name, "judge_ok": verdict.ok,
                       **_differences(flatten_outputs(gpu)[name], c)}
                rows.append(row)
                print(json.dumps(row), flush=True)
            del inputs, gpu, cpu
            if args.device == "cuda":
                torch.cuda.empty_cache()
    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
        "torch": torch.__version__, "python": platform.python_version(),
        "seed": args.seed,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "refs_b_device_agreement.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"\n| op | shape | output | dtype | judge ok | bitwise equal | max abs | max rel |  ({meta['device']}, torch {meta['torch']})")
    for r in rows:
        print(f"| {r['op']} | {r['shape_id']} | {r['output']} | {r['dtype']} | {r['judge_ok']} | {r['bitwise_equal']} | "
              f"{r['max_abs']:.3g} | {r['max_rel']:.3g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
