"""rms_norm in Triton: one program per row.

    out[t, :] = bf16( x[t, :] · rsqrt(mean(x[t, :]²) + eps) · weight )      (fp32 inside)

Each program loads a whole row (BLOCK_H = next power of two ≥ H, masked), so the row is read
from HBM once and the mean of squares is a single in-register reduction. Rows are
independent, so the grid is simply (T,). num_warps grows with the row width so each thread
holds a handful of elements. Memory-bound: the best it can do is read x and weight and write
out once.
"""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _rms_norm_rows(x_ptr, w_ptr, out_ptr, stride_x, stride_out, H, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv_rms = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)
    y = x * inv_rms * w
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    def __init__(self, *, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        T, H = x.shape
        block = triton.next_power_of_2(H)
        num_warps = min(16, max(1, block // 256))
        _rms_norm_rows[(T,)](
            x, weight, out, x.stride(0), out.stride(0), H, self.eps, BLOCK_H=block, num_warps=num_warps
        )
        return out
