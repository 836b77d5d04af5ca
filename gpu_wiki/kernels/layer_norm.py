"""
+++
title = "LayerNorm with affine weight and bias: two-moment statistics from registers"
operator = "layer_norm"
op_family = ["norm"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["layernorm", "mean", "variance", "biased variance", "row reduction", "memory-bound", "bf16"]
sources = [
  "Ba, Kiros, Hinton, Layer Normalization, 2016 — https://arxiv.org/abs/1607.06450",
  "Triton tutorial: Layer Normalization — https://triton-lang.org/main/getting-started/tutorials/05-layer-norm.html",
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
operator_score = 0.142
median_time_ms = 0.0137
median_dsl_share = 1
time_ms = { "0" = 0.00726, "1" = 0.0079, "2" = 0.00867, "3" = 0.0137, "4" = 0.0195, "5" = 0.0329, "6" = 0.0849, "7" = 0.0874, "8" = 0.139, "9" = 0.385, "10" = 0.0047, "11" = 0.0047, "12" = 0.00733 }
failures = {}
+++
out = bf16((x - mean) / sqrt(var + eps) * weight + bias), var biased, all in fp32.

The row is held in registers, so the variance is computed from the centred values
(`mean((x - mu)^2)`, exact like the reference) instead of `E[x^2] - mu^2`, which loses
precision when |mean| ≫ std. The input may be 3-D ([N, 1, H]); it is viewed as rows.
`1 / sqrt` uses `tl.sqrt_rn` and IEEE division (`tl.div_rn`) to follow the reference's
`/ torch.sqrt(...)` closely; the cost is invisible in a memory-bound kernel. Several rows per
program for the H = 1152 shapes (2 rows of a 2048-wide block).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _layer_norm_rows(x_ptr, w_ptr, b_ptr, out_ptr, n_rows, H, eps, ROWS: tl.constexpr, BLOCK_H: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_H)
    col_ok = cols < H
    mask = (rows < n_rows)[:, None] & col_ok[None, :]
    offs = rows[:, None] * H + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / H
    centred = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(centred * centred, axis=1) / H
    denom = tl.sqrt_rn(var + eps)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    y = tl.div_rn(centred, denom[:, None]) * w[None, :] + b[None, :]
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class Model(torch.nn.Module):
    def __init__(self, *, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        H = x.shape[-1]
        x2 = x.reshape(-1, H).contiguous()
        out = torch.empty_like(x2)
        block_h = triton.next_power_of_2(H)
        rows = max(1, 4096 // block_h)
        _layer_norm_rows[(triton.cdiv(x2.shape[0], rows),)](
            x2, weight, bias, out, x2.shape[0], H, self.eps, ROWS=rows, BLOCK_H=block_h, num_warps=8
        )
        return out.view(x.shape)
