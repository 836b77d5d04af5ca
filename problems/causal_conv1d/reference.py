"""causal_conv1d: depthwise causal 1-D convolution over time (channels first), seeded with the
previous width-1 inputs from a state, plus bias, then SiLU — the short convolution of
Mamba-style / gated-delta-net layers.

X' = concat(initial_state[0, :, -(W-1):], x) along time, shape (Dm, W-1+T).
y[d, t] = bf16( bias[d] + sum_j weight[d, j] * X'[d, t + j] )   (fp32 accumulation, one rounding)
out = bf16( silu(fp32(y)) )                                        (second rounding)
weight[d, W-1] multiplies the current input x[d, t]; weight[d, 0] the input W-1 steps earlier.
The updated convolution state is not returned.
"""

import torch
from torch import nn
from torch.nn import functional as F

_ACTIVATIONS = (None, "silu", "swish")


class Model(nn.Module):
    def __init__(self, *, activation: str | None = "silu"):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {_ACTIVATIONS}, got {activation!r}")
        self.activation = activation

    def forward(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, initial_state: torch.Tensor
    ) -> torch.Tensor:
        """x (Dm, T), weight (Dm, W), bias (Dm,), initial_state (1, Dm, W-1), all bf16 -> out (Dm, T) bf16."""
        dtype = weight.dtype
        width, tokens = weight.shape[1], x.shape[1]
        history = initial_state[0, :, initial_state.shape[-1] - (width - 1) :]
        padded = torch.cat([history.to(dtype), x.to(dtype)], dim=1).float()
        taps = weight.float()
        acc = bias.float().unsqueeze(1).expand(-1, tokens)
        for j in range(width):
            acc = acc + taps[:, j : j + 1] * padded[:, j : j + tokens]
        y = acc.to(dtype)
        if self.activation is None:
            return y
        return F.silu(y.float()).to(dtype)
