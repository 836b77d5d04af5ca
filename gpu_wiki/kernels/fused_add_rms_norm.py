"""
+++
title = "Fused residual add + RMS norm: one pass, two outputs, the bf16 sum normalised"
operator = "fused_add_rms_norm"
op_family = ["norm"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["rmsnorm", "residual", "fusion", "two outputs", "double rounding", "memory-bound", "bf16"]
sources = [
  "Zhang & Sennrich, Root Mean Square Layer Normalization, NeurIPS 2019 — https://arxiv.org/abs/1910.07467",
  "Triton tutorial: Layer Normalization — https://triton-lang.org/main/getting-started/tutorials/05-layer-norm.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 19/19 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18"]
shapes_scored = 19
shapes_correct = 19
operator_score = 0.331
median_time_ms = 0.0111
median_dsl_share = 1
time_ms = { "0" = 0.0601, "1" = 0.00432, "2" = 0.00477, "3" = 0.0057, "4" = 0.0073, "5" = 0.0111, "6" = 0.0423, "7" = 0.00544, "8" = 0.00669, "9" = 0.00963, "10" = 0.0133, "11" = 0.0187, "12" = 0.158, "13" = 0.00477, "14" = 0.00602, "15" = 0.0122, "16" = 0.0152, "17" = 0.123, "18" = 0.304 }
failures = {}
+++
s = bf16(x + residual); out = bf16(s * rsqrt(mean(s^2) + eps) * weight); returns {out, residual: s}.

The reference normalises the *rounded* bf16 sum, so the kernel rounds `x + residual` to
bf16 and back before computing the statistics — skipping that step changes about one
output in a few hundred by one bf16 ulp. Traffic is the fused minimum: read x and
residual, write out and the new residual (8 bytes per element). Hidden sizes here are
1280–7168, so one row per program with BLOCK_H = next_power_of_2(H) and 4–8 warps keeps
8–16 bf16 values per thread (one or two 16-byte loads per tensor).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _add_rms_norm_row(x_ptr, res_ptr, w_ptr, out_ptr, sum_ptr, H, eps, BLOCK_H: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * H
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
    s_low = (x + r).to(sum_ptr.dtype.element_ty)  # the reference rounds the sum first
    tl.store(sum_ptr + base + cols, s_low, mask=mask)
    s = s_low.to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(s * s, axis=0) / H + eps)
    tl.store(out_ptr + base + cols, (s * inv_rms * w).to(out_ptr.dtype.element_ty), mask=mask)


class Model(torch.nn.Module):
    def __init__(self, *, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        H = x.shape[-1]
        x2, r2 = x.reshape(-1, H).contiguous(), residual.reshape(-1, H).contiguous()
        out = torch.empty_like(x2)
        summed = torch.empty_like(x2)
        block_h = triton.next_power_of_2(H)
        _add_rms_norm_row[(x2.shape[0],)](
            x2, r2, weight, out, summed, H, self.eps, BLOCK_H=block_h, num_warps=8 if block_h >= 4096 else 4
        )
        return {"out": out.view(x.shape), "residual": summed.view(x.shape)}
