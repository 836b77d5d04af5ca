"""
+++
title = "QK-norm on packed QKV: per-head RMS norm of q and k, v copied, one launch"
operator = "fused_qk_rmsnorm"
op_family = ["norm", "attention"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["qk norm", "rmsnorm", "per head", "packed qkv", "horizontal fusion", "fp16", "double rounding", "decode", "launch overhead"]
sources = [
  "Dehghani et al., Scaling Vision Transformers to 22 Billion Parameters (QK normalisation), ICML 2023 — https://arxiv.org/abs/2302.05442",
  "Triton tutorial: Layer Normalization — https://triton-lang.org/main/getting-started/tutorials/05-layer-norm.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 4/4 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "3", "4"]
shapes_scored = 4
shapes_correct = 4
operator_score = 0.00148
median_time_ms = 0.00381
median_dsl_share = 1
time_ms = { "0" = 0.00381, "1" = 0.00381, "3" = 0.00381, "4" = 0.00381 }
failures = {}
+++
For each 128-wide head vector of the q part and the k part of `hidden_states`:
n = f16(x * rsqrt(mean(x^2) + eps)); y = f16(weight * n). The v part is copied unchanged and
the output is the concatenation (same layout as the input).

Two roundings, as in the reference: the normalised value is rounded to the storage dtype
before the weight multiply. Shapes are decode-sized (1–3 tokens, ≤ 80 heads): the whole
operator is a few tens of KB, so it is launch-bound. One kernel does everything — a program
per (token, head slot) over all Hq + 2·Hkv slots, with the slot deciding between q weight,
k weight and plain copy — instead of split + two norms + cat (four or more launches).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _qk_norm_heads(x_ptr, qw_ptr, kw_ptr, out_ptr, n_heads, n_q, n_k, eps, D: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.program_id(1)
    d = tl.arange(0, D)
    offs = token * n_heads * D + slot * D + d
    x = tl.load(x_ptr + offs)
    if slot < n_q + n_k:
        w_ptr = qw_ptr if slot < n_q else kw_ptr
        xf = x.to(tl.float32)
        normed = (xf * tl.rsqrt(tl.sum(xf * xf, axis=0) / D + eps)).to(x.dtype)
        y = (tl.load(w_ptr + d).to(tl.float32) * normed.to(tl.float32)).to(x.dtype)
        tl.store(out_ptr + offs, y)
    else:
        tl.store(out_ptr + offs, x)


class Model(torch.nn.Module):
    def __init__(self, *, head_num: int, kv_head_num: int, size_per_head: int = 128, eps: float = 1e-6):
        super().__init__()
        self.head_num, self.kv_head_num, self.size_per_head, self.eps = head_num, kv_head_num, size_per_head, eps

    def forward(self, hidden_states: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor) -> torch.Tensor:
        x = hidden_states.contiguous()
        n_heads = self.head_num + 2 * self.kv_head_num
        tokens = x.numel() // (n_heads * self.size_per_head)
        out = torch.empty_like(x)
        _qk_norm_heads[(tokens, n_heads)](
            x,
            q_weight,
            k_weight,
            out,
            n_heads,
            self.head_num,
            self.kv_head_num,
            self.eps,
            D=self.size_per_head,
            num_warps=1,
        )
        return out
