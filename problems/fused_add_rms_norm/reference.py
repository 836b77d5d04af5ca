"""Residual add followed by RMS normalisation; returns the normalised tensor and the new residual.

    s   = bf16( x + residual )                                   # rounded sum
    out = bf16( s * rsqrt(mean(s^2, over H) + eps) * weight )    # fp32, one rounding

The norm is taken of the rounded bf16 sum s, not of the exact sum.
Output: {"out": out, "residual": s}.
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, *, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        summed = (x.float() + residual.float()).to(x.dtype)
        sf = summed.float()
        inv_rms = torch.rsqrt(sf.square().mean(dim=-1, keepdim=True) + self.eps)
        out = (sf * inv_rms * weight.float()).to(x.dtype)
        return {"out": out, "residual": summed}
