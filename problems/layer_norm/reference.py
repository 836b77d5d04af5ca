"""Affine layer normalisation over the last dimension (biased variance), fp32, one rounding.

    mu  = mean(x);  var = mean((x - mu)^2)
    out = bf16( (x - mu) / sqrt(var + eps) * weight + bias )

eps is the framework default 1e-5. x may be 2-D (T, H) or 3-D (N, 1, H).
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, *, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        centred = xf - xf.mean(dim=-1, keepdim=True)
        var = centred.square().mean(dim=-1, keepdim=True)
        return (centred / torch.sqrt(var + self.eps) * weight.float() + bias.float()).to(x.dtype)
