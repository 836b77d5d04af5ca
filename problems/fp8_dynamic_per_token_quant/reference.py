"""Dynamic symmetric per-row quantisation of a bf16 matrix to fp8 e4m3fn (max 448).

Per row, in fp32:
    m     = max(max_c |x[c]|, 1e-12)
    scale = m / 448                      (IEEE division)
    inv   = 1 / scale                    (IEEE reciprocal)
    q[c]  = e4m3fn( clamp(x[c] * inv, -448, 448) )   (round to nearest even)

Output: (q (T, H) float8_e4m3fn, scale (T,) fp32). The codes are exact: multiply by the
reciprocal, do not divide by the scale. e4m3fn is the NVIDIA fp8 format; the source's
e4m3fnuz (max 240) is a ROCm format (see problems/CHANGES.md).
"""

import torch
from torch import nn

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xf = x.float()
        scale = xf.abs().amax(dim=-1).clamp(min=1e-12) / FP8_MAX
        inv_scale = torch.reciprocal(scale)
        q = (xf * inv_scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(FP8)
        return q, scale
