"""Dynamic symmetric per-row quantisation of a bf16 matrix to fp8 e4m3fnuz (max 240).

Per row, in fp32:
    m     = max(max_c |x[c]|, 1e-12)
    scale = m / 240                      (IEEE division)
    inv   = 1 / scale                    (IEEE reciprocal)
    q[c]  = e4m3fnuz( clamp(x[c] * inv, -240, 240) )   (round to nearest even)

Output: (q (T, H) float8_e4m3fnuz, scale (T,) fp32). The codes are exact: multiply by the
reciprocal, do not divide by the scale. e4m3fnuz is used on every platform.
"""

import torch
from torch import nn

FP8 = torch.float8_e4m3fnuz
FP8_MAX = 240.0


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xf = x.float()
        scale = xf.abs().amax(dim=-1).clamp(min=1e-12) / FP8_MAX
        inv_scale = torch.reciprocal(scale)
        q = (xf * inv_scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(FP8)
        return q, scale
