"""
+++
title = "Paged decode attention with the split-key (x-packed) cache layout, GQA heads in one tile"
operator = "paged_attention_decode"
op_family = ["attention"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["paged attention", "decode", "kv cache", "block table", "gqa", "online softmax", "split key layout", "vllm layout", "memory-bound", "exp2"]
sources = [
  "Kwon et al., Efficient Memory Management for Large Language Model Serving with PagedAttention, SOSP 2023 — https://arxiv.org/abs/2309.06180",
  "Milakov & Gimelshein, Online normalizer calculation for softmax, 2018 — https://arxiv.org/abs/1805.02867",
  "Triton tutorial: Fused Attention — https://triton-lang.org/main/getting-started/tutorials/06-fused-attention.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 8/8 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4", "5", "6", "7"]
shapes_scored = 8
shapes_correct = 8
operator_score = 0.0276
median_time_ms = 0.0164
median_dsl_share = 1
time_ms = { "0" = 0.21, "1" = 0.0212, "2" = 0.0223, "3" = 0.0161, "4" = 0.0164, "5" = 0.0143, "6" = 0.0164, "7" = 0.0162 }
failures = {}
+++
out[i, h] = softmax(q[i, h] · Kᵀ / √D) · V over the seq_lens[i] context positions of sequence i,
whose keys live in k_cache[block, kv_head, d // x, slot, d % x] and values in
v_cache[block, kv_head, d, slot], block = block_tables[i, p // bs], slot = p % bs.

One program per (sequence, kv head) handles all G = Hq/Hkv query heads that share that kv head
as the rows of a [max(16, G), D] tile: every K/V element is loaded once for the whole group
and the scores are a `tl.dot` (rows past G are masked). The context is walked in tiles of
BLOCK_N = 64 positions (4 cache blocks of 16) with an online softmax in base 2. Keys are
gathered as [BLOCK_N, D] from runs of x = 8 contiguous elements (16 bytes); values as the
transposed [D, BLOCK_N] tile, whose rows are runs of 16 contiguous slots. Decode attention is
memory-bound (≈ G FLOP per byte of cache); contexts here are ≤ 128 tokens, so no split-KV.
P is cast to the value dtype for the P·V product (standard flash practice; the reference
keeps it in fp32 — a difference far below the output's resolution).
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
def _paged_decode(
    q_ptr,
    k_ptr,
    v_ptr,
    table_ptr,
    lens_ptr,
    out_ptr,
    qk_scale,
    Hq,
    Hkv,
    max_blocks,
    G: tl.constexpr,
    G_PAD: tl.constexpr,
    D: tl.constexpr,
    BS: tl.constexpr,
    X: tl.constexpr,
    BLOCK_N: tl.constexpr,
    WIDEN: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    length = tl.load(lens_ptr + seq)
    g = tl.arange(0, G_PAD)
    d = tl.arange(0, D)
    heads = kvh * G + g
    q = tl.load(q_ptr + (seq * Hq + heads)[:, None] * D + d[None, :], mask=(g < G)[:, None], other=0.0)
    m_i = tl.full([G_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, D], tl.float32)
    block_elems = Hkv * D * BS  # elements of one cache block (both layouts)
    for start in range(0, length, BLOCK_N):
        p = start + tl.arange(0, BLOCK_N)
        live = p < length
        blk = tl.load(table_ptr + seq * max_blocks + p // BS, mask=live, other=0).to(tl.int64)
        base = blk * block_elems + kvh * D * BS
        slot = p % BS
        k = tl.load(
            k_ptr + base[:, None] + (d // X)[None, :] * (BS * X) + slot[:, None] * X + (d % X)[None, :],
            mask=live[:, None],
            other=0.0,
        )  # [BLOCK_N, D]
        vt = tl.load(
            v_ptr + base[None, :] + d[:, None] * BS + slot[None, :], mask=live[None, :], other=0.0
        )  # [D, BLOCK_N]
        s = _mma(q, tl.trans(k), tl.zeros([G_PAD, BLOCK_N], tl.float32), WIDEN) * qk_scale
        s = tl.where(live[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        prob = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(prob, axis=1)
        acc = _mma(prob.to(vt.dtype), tl.trans(vt), acc * alpha[:, None], WIDEN)
        m_i = m_new
    out = tl.where(l_i[:, None] > 0, acc / l_i[:, None], 0.0)
    tl.store(
        out_ptr + (seq * Hq + heads)[:, None] * D + d[None, :], out.to(out_ptr.dtype.element_ty), mask=(g < G)[:, None]
    )


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(
        self,
        query: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
    ) -> torch.Tensor:
        S, Hq, D = query.shape
        Hkv, bs, x = k_cache.shape[1], k_cache.shape[3], k_cache.shape[4]
        G = Hq // Hkv
        out = torch.empty_like(query)
        qk_scale = D**-0.5 * 1.4426950408889634  # fold log2(e): softmax via exp2
        _paged_decode[(S, Hkv)](
            query.contiguous(),
            k_cache.contiguous(),
            v_cache.contiguous(),
            block_tables.contiguous(),
            seq_lens,
            out,
            qk_scale,
            Hq,
            Hkv,
            block_tables.shape[1],
            G=G,
            G_PAD=max(16, triton.next_power_of_2(G)),
            D=D,
            BS=bs,
            X=x,
            BLOCK_N=64,
            WIDEN=_WIDEN_DOT,
            num_warps=4,
            num_stages=2,
        )
        return out
