"""
+++
title = "MLA decode attention (absorbed form): all heads against one shared latent cache, latent/rope split"
operator = "mla_decode_attention"
op_family = ["attention"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["mla", "multi-head latent attention", "deepseek", "decode", "absorbed", "latent cache", "kv_lora_rank", "rope dim", "online softmax", "tl.dot"]
sources = [
  "DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language Model (Multi-head Latent Attention), 2024 — https://arxiv.org/abs/2405.04434",
  "Dao et al., FlashAttention, NeurIPS 2022 — https://arxiv.org/abs/2205.14135",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 3/3 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2"]
shapes_scored = 3
shapes_correct = 3
operator_score = 0.0239
median_time_ms = 0.0201
median_dsl_share = 1
time_ms = { "0" = 0.0127, "1" = 0.0201, "2" = 0.0201 }
failures = {}
+++
For batch entry i with cache rows C (len_i × (L + R), L = 512 latent, R = 64 rope) and every
head h: out[i, h] = softmax(C · q[i, h] / √(L + R)) · C[:, :L].

Every query head reads the same latent rows, so a program takes H_BLK = 16 heads of one batch
entry and turns attention into two small GEMMs per context tile: scores = q_lat·C_latᵀ +
q_rope·C_ropeᵀ (the 576-wide dot is split at the power-of-two boundary 512 | 64, so no padding
to 1024) and acc += P·C_lat. The [16, 512] fp32 accumulator is 64 registers per thread with 4
warps. Per byte of cache the program does 16 heads' worth of work; with 128 heads that is 8
programs per batch entry re-reading the (L2-resident) cache. The start row of entry i is the
sum of the previous seq_lens, accumulated in-kernel (batch ≤ 8 here) instead of a separate cumsum.
"""

import os

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter multiplies bf16 tiles in tl.dot as raw integers (triton-lang/triton issue
# #11584): when interpreting, operands are widened to fp32 first.
_WIDEN_DOT = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _mma(a, b, acc, WIDEN: tl.constexpr):
    if WIDEN:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def _mla_decode(
    q_ptr,
    kv_ptr,
    lens_ptr,
    out_ptr,
    qk_scale,
    n_heads,
    L: tl.constexpr,
    R: tl.constexpr,
    H_BLK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    WIDEN: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1) * H_BLK + tl.arange(0, H_BLK)
    h_ok = h < n_heads
    start = 0
    for j in range(0, b):
        start += tl.load(lens_ptr + j)
    length = tl.load(lens_ptr + b)
    W: tl.constexpr = L + R
    dl = tl.arange(0, L)
    dr = tl.arange(0, R)
    q_rows = (b * n_heads + h).to(tl.int64)[:, None] * W
    q_lat = tl.load(q_ptr + q_rows + dl[None, :], mask=h_ok[:, None], other=0.0)
    q_rope = tl.load(q_ptr + q_rows + L + dr[None, :], mask=h_ok[:, None], other=0.0)
    m_i = tl.full([H_BLK], float("-inf"), tl.float32)
    l_i = tl.zeros([H_BLK], tl.float32)
    acc = tl.zeros([H_BLK, L], tl.float32)
    for n0 in range(0, length, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        live = n < length
        rows = (start + n).to(tl.int64)[:, None] * W
        c_lat = tl.load(kv_ptr + rows + dl[None, :], mask=live[:, None], other=0.0)  # [BLOCK_N, L]
        c_rope = tl.load(kv_ptr + rows + L + dr[None, :], mask=live[:, None], other=0.0)  # [BLOCK_N, R]
        s = _mma(q_lat, tl.trans(c_lat), tl.zeros([H_BLK, BLOCK_N], tl.float32), WIDEN)
        s = _mma(q_rope, tl.trans(c_rope), s, WIDEN) * qk_scale
        s = tl.where(live[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        prob = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(prob, axis=1)
        acc = _mma(prob.to(c_lat.dtype), c_lat, acc * alpha[:, None], WIDEN)
        m_i = m_new
    out = tl.where(l_i[:, None] > 0, acc / l_i[:, None], 0.0)
    tl.store(
        out_ptr + (b * n_heads + h).to(tl.int64)[:, None] * L + dl[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=h_ok[:, None],
    )


class Model(torch.nn.Module):
    def __init__(self, *, nhead: int, kv_lora_rank: int = 512, qk_rope_head_dim: int = 64):
        super().__init__()
        self.nhead, self.kv_lora_rank, self.qk_rope_head_dim = nhead, kv_lora_rank, qk_rope_head_dim

    def forward(self, q: torch.Tensor, kv_cache: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
        B, Hn, W = q.shape
        L, R = self.kv_lora_rank, self.qk_rope_head_dim
        out = torch.empty((B, Hn, L), dtype=q.dtype, device=q.device)
        h_blk = 16
        qk_scale = W**-0.5 * 1.4426950408889634
        _mla_decode[(B, triton.cdiv(Hn, h_blk))](
            q.contiguous(),
            kv_cache.contiguous(),
            seq_lens,
            out,
            qk_scale,
            Hn,
            L=L,
            R=R,
            H_BLK=h_blk,
            BLOCK_N=32,
            WIDEN=_WIDEN_DOT,
            num_warps=4,
            num_stages=2,
        )
        return out
