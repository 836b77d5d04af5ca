"""Symmetric fp8 e4m3fn quantisation (max F = 448) with one fp32 scale per row and per group of
G consecutive columns.

Per row and group, in fp32:
    a     = max |x|
    scale = max(a / F, 1e-10)                                   (IEEE division)
    q     = e4m3fn( clamp(x / scale, -F, F) )                   (IEEE division, nearest even)

Output: {"quantized": q (T, H) float8_e4m3fn, "scales": (T, H/G) fp32}. H must be a multiple
of G. Divide by the scale; do not multiply by its reciprocal.
"""

import torch
from torch import nn

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


class Model(nn.Module):
    def __init__(self, *, group_size: int = 128):
        super().__init__()
        self.group_size = group_size

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        groups = x.unflatten(-1, (-1, self.group_size))
        # |x| and max are exact in bf16, so the group maximum needs no fp32 copy of x.
        scales = (groups.abs().amax(dim=-1).float() / FP8_MAX).clamp(min=1e-10)
        # bf16 / fp32 promotes to fp32(x) / scale; the clamp then works on that fp32 result in place.
        scaled = (groups / scales.unsqueeze(-1)).clamp_(-FP8_MAX, FP8_MAX)
        return {"quantized": scaled.to(FP8).flatten(-2), "scales": scales}
