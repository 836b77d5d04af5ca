"""moe_sum_reduce: sum each token's k already-weighted expert outputs, then apply the routing
scale factor.

out[t, :] = bf16( (sum_s fp32(x[t, s, :])) * routed_scaling_factor )
The sum is taken in fp32 before the multiply, and the multiply happens even when the factor is 1.
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, *, routed_scaling_factor: float = 1.0):
        super().__init__()
        self.routed_scaling_factor = float(routed_scaling_factor)

    def forward(self, expert_outputs: torch.Tensor) -> torch.Tensor:
        """expert_outputs (T, k, H) bf16 -> out (T, H) bf16."""
        summed = expert_outputs.float().sum(dim=1)
        return (summed * self.routed_scaling_factor).to(expert_outputs.dtype)
