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
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 13/13 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"]
shapes_scored = 13
shapes_correct = 13
operator_score = 0.425
median_time_ms = 0.0328
median_dsl_share = 1
time_ms = { "0" = 0.00358, "1" = 0.0041, "2" = 0.00413, "3" = 0.00461, "4" = 0.00752, "5" = 0.0547, "6" = 0.0185, "7" = 0.0328, "8" = 0.179, "9" = 0.192, "10" = 0.251, "11" = 0.397, "12" = 0.457 }
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
