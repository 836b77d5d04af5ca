"""
+++
title = "Residual add + RMS norm + per-row fp8 quantisation in one pass (three outputs)"
operator = "fused_rmsnorm_quant"
op_family = ["norm", "quant"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["rmsnorm", "fp8", "e4m3fn", "quantisation", "residual", "fusion", "single rounding", "div_rn", "scale (T, 1)", "memory-bound"]
sources = [
  "Zhang & Sennrich, Root Mean Square Layer Normalization, NeurIPS 2019 — https://arxiv.org/abs/1910.07467",
  "Micikevicius et al., FP8 Formats for Deep Learning, 2022 — https://arxiv.org/abs/2209.05433",
  "Triton API: tl.div_rn — https://triton-lang.org/main/python-api/generated/triton.language.div_rn.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 11/11 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]
shapes_scored = 11
shapes_correct = 11
operator_score = 0.343
median_time_ms = 0.0185
median_dsl_share = 1
time_ms = { "0" = 0.0057, "1" = 0.00922, "2" = 0.0137, "3" = 0.0185, "4" = 0.162, "5" = 0.231, "6" = 0.0113, "7" = 0.0147, "8" = 0.0222, "9" = 0.0373, "10" = 0.282 }
failures = {}
+++
r = bf16(x + residual); normed = bf16(r · rsqrt(mean(r²) + eps) · w) (one rounding);
scale = amax|normed| / 448 (1 where 0); q = e4m3fn(normed / scale) (IEEE division, no clamp).
Returns (q (T, H), scale (T, 1) fp32, r (T, H) bf16).

Everything happens on a row held in registers, so the bf16 `normed` tensor is never written
and re-read for its maximum: traffic is the fused minimum (read x, residual; write r, q, scale).
The codes depend on the exact bf16 value of `normed`, so the kernel rounds it before the
maximum and the division, exactly where the reference does, and divides with `tl.div_rn`
(`/` is approximate on NVIDIA GPUs). Without a clamp the quotient can exceed 448 by one fp32
rounding; rounding to the e4m3 grid (`_round_to_e4m3_grid`, also needed because the CPU
interpreter's own cast mis-rounds) maps it to 448 as the reference's cast does. The two bf16
roundings are done in fp32 integer arithmetic (`_round_to_bf16`) for the same reason: the
interpreter truncates fp32 → bf16, which would shift a row's maximum and with it every code.
The kernel assumes bf16 activations (as the operator defines them).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _round_to_e4m3_grid(v, MIN_EXP: tl.constexpr):
    """Round fp32 to the nearest e4m3 value (ties to even) in fp32 arithmetic, so the cast that
    follows is exact. The GPU's convert would round correctly by itself; Triton's CPU
    interpreter (3.9) drops the carry when rounding bumps the exponent (127.6 -> 64)."""
    bits = v.to(tl.int32, bitcast=True)
    e = tl.maximum(((bits >> 23) & 0xFF) - 127, MIN_EXP) - 3  # exponent of one ulp
    ulp = ((e + 127) << 23).to(tl.float32, bitcast=True)
    inv_ulp = ((127 - e) << 23).to(tl.float32, bitcast=True)
    r = ((tl.abs(v) * inv_ulp + 12582912.0) - 12582912.0) * ulp  # + 1.5 * 2^23: round to integer, ties to even
    return (r.to(tl.int32, bitcast=True) | (bits & -2147483648)).to(tl.float32, bitcast=True)


@triton.jit
def _round_to_bf16(v):
    """fp32 → the nearest bf16 value (ties to even), still as fp32, so a later bf16 cast is exact.
    The GPU's cast rounds like this by itself; Triton's CPU interpreter (3.9) truncates, and the
    fp8 codes here depend on the exact bf16 value of the sum and of the normalised row."""
    bits = v.to(tl.int32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    return rounded.to(tl.float32, bitcast=True)


@triton.jit
def _rmsnorm_quant(x_ptr, res_ptr, w_ptr, q_ptr, s_ptr, sum_ptr, H, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32)
    res = tl.load(res_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32)
    u = _round_to_bf16(x + res)  # the reference's bf16 sum
    tl.store(sum_ptr + row * H + cols, u.to(sum_ptr.dtype.element_ty), mask=mask)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    normed = _round_to_bf16(u * tl.rsqrt(tl.sum(u * u, axis=0) / H + eps) * w)  # one rounding, to bf16
    scale = tl.div_rn(tl.max(tl.abs(normed), axis=0), 448.0)
    scale = tl.where(scale == 0.0, 1.0, scale)
    q = _round_to_e4m3_grid(tl.div_rn(normed, scale), -6)
    tl.store(q_ptr + row * H + cols, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + row, scale)


class Model(torch.nn.Module):
    def __init__(self, *, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
        H = x.shape[-1]
        x2, r2 = x.reshape(-1, H).contiguous(), residual.reshape(-1, H).contiguous()
        T = x2.shape[0]
        q = torch.empty((T, H), dtype=torch.float8_e4m3fn, device=x.device)
        scale = torch.empty((T, 1), dtype=torch.float32, device=x.device)
        summed = torch.empty_like(x2)
        block_h = triton.next_power_of_2(H)
        _rmsnorm_quant[(T,)](
            x2, r2, weight, q, scale, summed, H, self.eps, BLOCK_H=block_h, num_warps=8 if block_h >= 4096 else 4
        )
        return q.view(x.shape), scale, summed.view(x.shape)
