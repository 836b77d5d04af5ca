"""RMS normalisation with a weight, combined with an activated gate z; fp32, one final rounding.

norm_before_gate=True:   out = bf16( x * rsqrt(mean(x^2) + eps) * weight * act(z) )
norm_before_gate=False:  g = x * act(z);  out = bf16( g * rsqrt(mean(g^2) + eps) * weight )

act is SiLU ('silu' or 'swish') or the logistic sigmoid ('sigmoid'); means are over the last dim.
"""

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = {"silu": F.silu, "swish": F.silu, "sigmoid": torch.sigmoid}


class Model(nn.Module):
    def __init__(self, *, eps: float = 1e-6, norm_before_gate: bool = True, activation: str = "silu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.eps = eps
        self.norm_before_gate = norm_before_gate
        self.activation = activation

    def forward(self, x: torch.Tensor, weight: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        gate = ACTIVATIONS[self.activation](z.float())
        xf = x.float() if self.norm_before_gate else x.float() * gate
        y = xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + self.eps) * weight.float()
        if self.norm_before_gate:
            y = y * gate
        return y.to(x.dtype)
