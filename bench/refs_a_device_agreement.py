"""How far each batch-A reference on CUDA departs from the same reference on CPU, on identical inputs.

The references are written in plain fp32 torch, but CUDA's rsqrt/exp/reductions are not those of
the CPU build, so a bf16 rounding or an fp8 code can flip. This measures that floor of
disagreement (per output: fraction of elements that differ, largest distance in units of the
output format's last place / fp8 codes), which the evaluator's tolerances must absorb.

    python3 bench/refs_a_device_agreement.py [--out bench/results] [--seed 1234]

Writes refs_a_device_agreement.json (with date, GPU, torch version) and prints a table.
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

# op -> a large scored shape (30-100 M input elements) whose CPU run still takes seconds, not minutes
LARGE_SHAPE = {
    "rms_norm": "14", "silu_and_mul": "6", "fused_add_rms_norm": "0", "fused_qk_rmsnorm": "0",
    "gated_rms_norm": "0", "l2_norm": "8", "layer_norm": "8", "fp8_dynamic_per_token_quant": "8",
    "per_token_group_quant_fp8": "1", "fused_rmsnorm_quant": "5",
}


def _outputs(out) -> list[tuple[str, torch.Tensor]]:
    if isinstance(out, dict):
        return sorted(out.items())
    if isinstance(out, tuple):
        return [(str(i), t) for i, t in enumerate(out)]
    return [("out", out)]


def _ordered(t: torch.Tensor) -> torch.Tensor:
    """Map each value's bits to an integer whose difference counts last places (codes for fp8)."""
    bits = t.contiguous().view({1: torch.int8, 2: torch.int16, 4: torch.int32}[t.element_size()]).long()
    sign_bit = 1 << (8 * t.element_size() - 1)
    return torch.where(bits < 0, -(bits + sign_bit), bits)


def _compare(gpu: torch.Tensor, cpu: torch.Tensor) -> dict:
    differ = _ordered(gpu.cpu()) != _ordered(cpu)
    return {
        "dtype": str(cpu.dtype).removeprefix("torch."),
        "numel": cpu.numel(),
        "differ_fraction": differ.double().mean().item(),
        "max_last_places": (_ordered(gpu.cpu()) - _ordered(cpu)).abs().max().item() if cpu.numel() else 0,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    cat = Catalog()
    rows = []
    for op, large_id in LARGE_SHAPE.items():
        Model, make_inputs = cat.load_reference(op), cat.load_make_inputs(op)
        for shape in (cat.visible(op).smoke_shape, cat.visible(op).shape(large_id)):
            inputs = make_inputs(seed=args.seed, device="cuda", **shape.inputs)
            with torch.no_grad():
                gpu = _outputs(Model(**shape.init)(**inputs))
                cpu = _outputs(Model(**shape.init)(**{k: v.cpu() for k, v in inputs.items()}))
            for (name, g), (_, c) in zip(gpu, cpu, strict=True):
                row = {"op": op, "shape_id": shape.id, "output": name, **_compare(g, c)}
                rows.append(row)
                print(json.dumps(row), flush=True)
            del inputs, gpu, cpu
            torch.cuda.empty_cache()
    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version(),
        "seed": args.seed,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "refs_a_device_agreement.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"\n| op | shape | output | dtype | differ | max last places |  ({meta['gpu']}, torch {meta['torch']})")
    for r in rows:
        print(f"| {r['op']} | {r['shape_id']} | {r['output']} | {r['dtype']} | {r['differ_fraction']:.2e} | {r['max_last_places']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
