"""{name}: the reference the candidate must match (edit it to describe your operator).

    out = bf16( x * sigmoid(x) * scale )      (computed in fp32, rounded to bf16 once)

The evaluator calls Model(**init) once per shape, then forward(**make_inputs(...)) per seed and
compares the outputs. Keep it plain PyTorch: it is the definition of "correct", not a kernel.
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, *, scale: float = 1.0):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.sigmoid(xf) * self.scale).to(x.dtype)
