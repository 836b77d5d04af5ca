"""Does each problem's reference give the same answer on a device (CUDA) as on the CPU, on
identical inputs?

The references are plain fp32 torch, but cuBLAS blocking, CUDA rsqrt/exp/sin/cos and reduction
orders differ from the CPU build, so a bf16/fp16 rounding or an fp8 code can flip; index and
copy outputs must agree exactly. For each operator this runs the reference at its smoke shape
and at the scored shapes in SHAPES (chosen so that the CPU run takes seconds, not minutes) on the
device and on the CPU, and records per output: the evaluator's verdict on the device output
judged against the CPU output (atrex_mcp.evaluate.compare), the share of elements whose bits
differ, the largest distance in units of the format's last place (fp8: codes; integers: value),
the largest absolute and relative differences, whether the device output holds NaN, and the
device time of the forward call. The full-size run of every scored shape (time, peak memory) is
measurements/run_references.py.

    python3 measurements/device_agreement.py [OP ...] [--device cuda] [--seed 1234] [--out measurements/results]

OP defaults to all operators in SHAPES. `--device cpu` compares the CPU with itself: a dry run
of the script. Writes device_agreement.json (with date, device, torch version) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from atrex_mcp.evaluate.compare import compare_outputs, flatten_outputs  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog  # noqa: E402

# op -> the scored shapes run besides the smoke shape: large enough to show the device's own
# arithmetic, small enough that the CPU run takes seconds.
SHAPES: dict[str, list[str]] = {
    "rms_norm": ["14"],
    "silu_and_mul": ["6"],
    "fused_add_rms_norm": ["0"],
    "fused_qk_rmsnorm": ["0"],
    "gated_rms_norm": ["0"],
    "l2_norm": ["8"],
    "layer_norm": ["8"],
    "fp8_dynamic_per_token_quant": ["8"],
    "per_token_group_quant_fp8": ["1"],
    "fused_rmsnorm_quant": ["5"],
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


def _ordered(t: torch.Tensor) -> torch.Tensor:
    """Integers whose differences count last places: a float's bits in sign-magnitude order
    (so -0 and +0 coincide; fp8 codes count steps), an integer's own value."""
    if not t.is_floating_point():
        return t.long()
    bits = t.contiguous().view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]).long()
    magnitude_mask = (1 << (8 * t.element_size() - 1)) - 1
    return torch.where(bits < 0, -(bits & magnitude_mask), bits)


def _raw_bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8).view(-1, t.element_size())


def differences(device_out: torch.Tensor, cpu_out: torch.Tensor) -> dict[str, Any]:
    """How one device output (already moved to the CPU) departs from the CPU output."""
    bits_differ = (_raw_bits(device_out) != _raw_bits(cpu_out)).any(dim=1)
    last_places = (_ordered(device_out) - _ordered(cpu_out)).abs()
    d, c = device_out.double(), cpu_out.double()
    finite = torch.isfinite(c)
    abs_err = (d - c).abs()[finite]
    return {
        "dtype": str(cpu_out.dtype).removeprefix("torch."),
        "numel": cpu_out.numel(),
        "bitwise_equal": not bool(bits_differ.any()),
        "differ_fraction": bits_differ.double().mean().item() if cpu_out.numel() else 0.0,
        "max_last_places": last_places.max().item() if cpu_out.numel() else 0,
        "max_abs": abs_err.max().item() if abs_err.numel() else 0.0,
        "max_rel": (abs_err / c[finite].abs().clamp_min(1e-6)).max().item() if abs_err.numel() else 0.0,
        "device_has_nan": bool(d.isnan().any()),
    }


def _to_cpu(out: Any) -> Any:
    """A device output moved to the CPU, keeping its container (tensor, tuple or dict)."""
    if isinstance(out, dict):
        return {k: v.cpu() for k, v in out.items()}
    if isinstance(out, tuple):
        return tuple(v.cpu() for v in out)
    return out.cpu()


def agreement(op: str, shape, model_cls, make_inputs, seed: int, device: str) -> list[dict[str, Any]]:
    """One row per output of the reference at one shape."""
    inputs = make_inputs(seed=seed, device=device, **shape.inputs)
    with torch.no_grad():
        start = time.perf_counter()
        on_device = model_cls(**shape.init)(**inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        device_s = time.perf_counter() - start
        on_cpu = model_cls(**shape.init)(**{k: v.cpu() for k, v in inputs.items()})
    on_device = _to_cpu(on_device)
    verdict = compare_outputs(on_cpu, on_device, op)
    device_leaves = flatten_outputs(on_device)
    return [
        {
            "op": op,
            "shape_id": shape.id,
            "output": name,
            "judge_ok": verdict.ok,
            "verdict": verdict.message,
            "device_s": round(device_s, 4),
            **differences(device_leaves[name], ref),
        }
        for name, ref in flatten_outputs(on_cpu).items()
    ]


TABLE = (
    ("op", "{}"),
    ("shape_id", "{}"),
    ("output", "{}"),
    ("dtype", "{}"),
    ("judge_ok", "{}"),
    ("bitwise_equal", "{}"),
    ("differ_fraction", "{:.2e}"),
    ("max_last_places", "{}"),
    ("max_abs", "{:.3g}"),
    ("max_rel", "{:.3g}"),
    ("device_has_nan", "{}"),
)  # (row key, cell format) of the printed table


def _table(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(key for key, _ in TABLE) + f" |  ({meta['device']}, torch {meta['torch']})"]
    for r in rows:
        cells = (
            [r["op"], r["shape_id"], f"ERROR {r['error'][:80]}"]
            if "error" in r
            else [fmt.format(r[k]) for k, fmt in TABLE]
        )
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ops", nargs="*", metavar="OP", help="operators to run (default: all)")
    ap.add_argument("--device", default="cuda", help="the device compared with the CPU ('cpu' is a dry run)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default=str(ROOT / "measurements" / "results"))
    args = ap.parse_args()
    unknown = [op for op in args.ops if op not in SHAPES]
    if unknown:
        ap.error(f"unknown operator(s) {', '.join(unknown)}; choose from {', '.join(SHAPES)}")
    ops = args.ops or list(SHAPES)

    cat = Catalog()
    rows: list[dict[str, Any]] = []
    for op in ops:
        model_cls, make_inputs = cat.load_reference(op), cat.load_make_inputs(op)
        problem = cat.visible(op)
        for shape in (problem.smoke_shape, *(problem.shape(i) for i in SHAPES[op])):
            try:
                shape_rows = agreement(op, shape, model_cls, make_inputs, args.seed, args.device)
            except Exception as exc:  # noqa: BLE001 - recorded per shape; the next shape still runs
                shape_rows = [{"op": op, "shape_id": shape.id, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}]
            for row in shape_rows:
                print(json.dumps(row), flush=True)
            rows += shape_rows
            if args.device == "cuda":
                torch.cuda.empty_cache()
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "seed": args.seed,
        "ops": ops,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "device_agreement.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print("\n" + _table(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
