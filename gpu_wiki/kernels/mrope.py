"""
+++
title = "Multimodal RoPE (M-RoPE, NeoX pairing): per-slot axis selection, q and k in one launch"
operator = "mrope"
op_family = ["rope"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["rope", "mrope", "rotary", "neox", "rotate-half", "multimodal", "qwen2-vl", "sections", "cos sin", "memory-bound", "bf16"]
sources = [
  "Su et al., RoFormer: Enhanced Transformer with Rotary Position Embedding, 2021 — https://arxiv.org/abs/2104.09864",
  "Wang et al., Qwen2-VL (Multimodal Rotary Position Embedding), 2024 — https://arxiv.org/abs/2409.12191",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 5/5 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4"]
shapes_scored = 5
shapes_correct = 5
operator_score = 0.51
median_time_ms = 0.0129
median_dsl_share = 1
time_ms = { "0" = 0.0129, "1" = 0.0255, "2" = 0.129, "3" = 0.00605, "4" = 0.00805 }
failures = {}
+++
Frequency slot f ∈ [0, R/2) takes cos/sin from the table of its axis (temporal / height /
width, contiguous sections [s_t, s_h, s_w] or the interleaved layout): c[f] = cos[axis(f), t, f].
For every head vector x of q and of k (NeoX pairing): x1 = x[:R/2], x2 = x[R/2:R];
y1 = bf16(x1·c − x2·s), y2 = bf16(x2·c + x1·s); dims ≥ R unchanged. Outputs {"q", "k"} in the
input layout.

A program owns one token and rotates all heads of q (axis 1 = 0) or of k (axis 1 = 1) as
[HEADS, R/2] tiles, so the token's cos/sin rows are gathered once and reused by every
head. The axis of each slot is computed from constexpr section sizes with two compares.
Memory-bound: 2 × 2 bytes per element plus the small fp32 tables.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _mrope(
    q_ptr,
    k_ptr,
    qo_ptr,
    ko_ptr,
    cos_ptr,
    sin_ptr,
    T,
    HQ,
    HK,
    S_T: tl.constexpr,
    S_H: tl.constexpr,
    S_W: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    HS: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_HEADS: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    is_k = tl.program_id(1) == 1
    f = tl.arange(0, HALF)
    if INTERLEAVED:
        axis = tl.where((f % 3 == 1) & (f <= 3 * S_H), 1, tl.where((f % 3 == 2) & (f <= 3 * S_W), 2, 0))
    else:
        axis = (f >= S_T).to(tl.int32) + (f >= S_T + S_H).to(tl.int32)
    table = axis.to(tl.int64) * T * HALF + t * HALF + f
    c = tl.load(cos_ptr + table)[None, :]
    s = tl.load(sin_ptr + table)[None, :]
    heads = HK if is_k else HQ
    src = k_ptr if is_k else q_ptr
    dst = ko_ptr if is_k else qo_ptr
    for h0 in range(0, heads, BLOCK_HEADS):
        h = h0 + tl.arange(0, BLOCK_HEADS)[:, None]
        m = h < heads
        base = t * heads * HS + h * HS + f[None, :]
        x1 = tl.load(src + base, mask=m, other=0.0).to(tl.float32)
        x2 = tl.load(src + base + HALF, mask=m, other=0.0).to(tl.float32)
        tl.store(dst + base, (x1 * c - x2 * s).to(dst.dtype.element_ty), mask=m)
        tl.store(dst + base + HALF, (x2 * c + x1 * s).to(dst.dtype.element_ty), mask=m)
        for p in tl.static_range(2 * HALF, HS, HALF):  # dims past the rotary part: copy
            tl.store(
                dst + base + p, tl.load(src + base + p, mask=m & (p + f[None, :] < HS)), mask=m & (p + f[None, :] < HS)
            )


class Model(torch.nn.Module):
    def __init__(
        self,
        *,
        head_size: int = 128,
        rotary_dim: int = 128,
        mrope_section=(16, 24, 24),
        mrope_interleaved: bool = False,
        is_neox_style: bool = True,
    ):
        super().__init__()
        if sum(mrope_section) != rotary_dim // 2:
            raise ValueError(f"mrope_section {list(mrope_section)} must sum to rotary_dim / 2 = {rotary_dim // 2}")
        if not is_neox_style:
            raise ValueError("this kernel implements the NeoX (rotate-half) pairing only")
        self.head_size, self.rotary_dim = head_size, rotary_dim
        self.mrope_section, self.mrope_interleaved = list(mrope_section), mrope_interleaved

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        q, k = q.contiguous(), k.contiguous()
        T = q.shape[0]
        hq, hk = q.shape[1] // self.head_size, k.shape[1] // self.head_size
        half = self.rotary_dim // 2
        if half != triton.next_power_of_2(half):
            raise ValueError("rotary_dim / 2 must be a power of two for this kernel")
        q_out, k_out = torch.empty_like(q), torch.empty_like(k)
        s_t, s_h, s_w = self.mrope_section
        _mrope[(T, 2)](
            q,
            k,
            q_out,
            k_out,
            cos.contiguous(),
            sin.contiguous(),
            T,
            hq,
            hk,
            S_T=s_t,
            S_H=s_h,
            S_W=s_w,
            INTERLEAVED=self.mrope_interleaved,
            HS=self.head_size,
            HALF=half,
            BLOCK_HEADS=min(16, triton.next_power_of_2(max(hq, hk))),
            num_warps=4,
        )
        return {"q": q_out, "k": k_out}
