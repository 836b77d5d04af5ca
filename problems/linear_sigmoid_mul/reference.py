"""linear_sigmoid_mul: a linear layer with bias makes a gate that goes through a sigmoid and
scales another tensor elementwise (the shared-expert gate of MoE layers).

gate = bf16( hidden_states @ weight^T + bias )      bf16 GEMM, fp32 accumulation, bias added
                                                    before the single rounding
out  = bf16( sigmoid(fp32(gate)) * fp32(post_mul_mat) )
The gate is rounded to bf16 before the sigmoid.
"""

import torch
from torch import nn
from torch.nn import functional as F


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(
        self, hidden_states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, post_mul_mat: torch.Tensor
    ) -> torch.Tensor:
        """hidden_states (T, H), weight (O, H), bias (O,), post_mul_mat (T, O), all bf16 -> out (T, O) bf16."""
        gate = F.linear(hidden_states, weight, bias)
        return (torch.sigmoid(gate.float()) * post_mul_mat.float()).to(post_mul_mat.dtype)
