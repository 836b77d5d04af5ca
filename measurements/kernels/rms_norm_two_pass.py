"""rms_norm in Triton, deliberately plain: one program per row, two passes over the row in
chunks of 128 columns (sum of squares, then scale and store), so x is read twice. A baseline
for the optimisation loop to improve on.

    out[t, :] = bf16( x[t, :] * 1/sqrt(mean(x[t, :]^2) + eps) * weight )      (fp32 inside)
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _rms_norm_two_pass(x_ptr, w_ptr, out_ptr, n_cols, eps, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * n_cols
    o_row = out_ptr + row * n_cols
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, n_cols, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    inv = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(o_row + cols, (x * inv * w).to(out_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    def __init__(self, *, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        _rms_norm_two_pass[(n_rows,)](x, weight, out, n_cols, self.eps, CHUNK=128, num_warps=4)
        return out
