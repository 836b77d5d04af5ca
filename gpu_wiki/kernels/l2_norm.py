"""
+++
title = "Row-wise L2 normalisation with eps inside the square root"
operator = "l2_norm"
op_family = ["norm"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["l2 norm", "normalize", "rsqrt", "row reduction", "memory-bound", "bf16", "qk norm"]
sources = [
  "Triton tutorial: Layer Normalization (row-reduction structure) — https://triton-lang.org/main/getting-started/tutorials/05-layer-norm.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-11-30: measured on shapes [0] of 13 scored; 1 correct"]

[h200]
status = "measured on a subset of shapes"
date = "2026-11-30"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
shapes_measured = ["0"]
shapes_scored = 13
shapes_correct = 1
operator_score_pending = "S over the full shape set: pending; measured on shapes [0]"
median_time_ms = 0.00362
median_dsl_share = 1
time_ms = { "0" = 0.00362 }
failures = {}
+++
out = bf16(x * rsqrt(sum(x^2) + eps)) — eps added to the sum of squares (not a clamp of the
norm as in F.normalize).

All shapes have H = 2048 (4 KB per bf16 row): two rows per program and 4 warps give each
thread 16 elements, two 16-byte vector loads. Pure streaming; the roofline is the copy
bandwidth (2 bytes in + 2 bytes out per element).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _l2_norm_rows(x_ptr, out_ptr, n_rows, H, eps, ROWS: tl.constexpr, BLOCK_H: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_H)
    mask = (rows < n_rows)[:, None] & (cols < H)[None, :]
    offs = rows[:, None] * H + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=1) + eps)[:, None]
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class Model(torch.nn.Module):
    def __init__(self, *, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.hidden_size = hidden_size
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        H = x.shape[-1]
        x2 = x.reshape(-1, H).contiguous()
        out = torch.empty_like(x2)
        block_h = triton.next_power_of_2(H)
        rows = max(1, 4096 // block_h)
        _l2_norm_rows[(triton.cdiv(x2.shape[0], rows),)](
            x2, out, x2.shape[0], H, self.eps, ROWS=rows, BLOCK_H=block_h, num_warps=4
        )
        return out.view(x.shape)
