"""How many fp8_blockscale_fused_moe outputs does the final clamp to the e4m3fn maximum change?

The reference clamps its fp32 mixture to [-448, 448] before the cast to float8_e4m3fn; a
non-saturating cast would turn every magnitude above 464 into NaN (problems/CHANGES.md). This
draws the problem's own inputs, computes the pre-cast mixture and reports, per seed, the share
of elements above 448 (saturated) and above 464 (NaN without the clamp), the largest magnitude
and the RMS, and checks that the reference output holds no NaN.

    python3 measurements/fp8_moe_saturation.py                       # CHANGES.md's CPU figures (minutes)
    python3 measurements/fp8_moe_saturation.py --shape 1 --device cuda --seeds 0   # a scored shape, on a GPU

Prints one JSON line per seed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from atrex_mcp.problemset.catalog import Catalog  # noqa: E402

OP = "fp8_blockscale_fused_moe"
FP8_MAX, NAN_ABOVE = 448.0, 464.0  # e4m3fn: largest value; a non-saturating cast gives NaN above this


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", help="a scored shape id of the problem (overrides the sizes below)")
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--intermediate", type=int, default=2048)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    cat = Catalog()
    if args.shape is not None:
        shape = cat.visible(OP).shape(args.shape)
        init, dims = shape.init, shape.inputs
    else:
        init = {"num_experts": args.experts, "intermediate_size": args.intermediate, "top_k": args.top_k}
        dims = {"token_count": args.tokens, "hidden_size": args.hidden, **init}
    model = cat.load_reference(OP)(**init)
    make_inputs = cat.load_make_inputs(OP)
    for seed in args.seeds:
        inputs = make_inputs(seed=seed, device=args.device, **dims)
        with torch.no_grad():
            magnitude = model.mixture_fp32(**inputs).abs()
            out = model(**inputs).float()
        row = {
            "shape": args.shape,
            "dims": dims,
            "seed": seed,
            "device": args.device,
            "saturated_share": (magnitude > FP8_MAX).double().mean().item(),
            "nan_without_clamp_share": (magnitude > NAN_ABOVE).double().mean().item(),
            "max_abs": magnitude.max().item(),
            "rms": magnitude.square().mean().sqrt().item(),
            "output_has_nan": bool(out.isnan().any()),
            "output_max_abs": out.abs().max().item(),
        }
        print(json.dumps(row), flush=True)
        del inputs, magnitude, out
    return 0


if __name__ == "__main__":
    sys.exit(main())
