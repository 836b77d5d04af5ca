"""
+++
title = "Unified paged attention: varlen causal prefill against a paged KV cache, GQA heads packed into the tile"
operator = "unified_attention"
op_family = ["attention"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["unified attention", "paged attention", "prefill", "varlen", "cu_seqlens", "block table", "kv cache", "gqa",
        "causal", "flash attention", "online softmax", "exp2", "binary search", "head dim 72", "head dim 256",
        "compute-bound"]
sources = [
  "Dao, FlashAttention-2, 2023 — https://arxiv.org/abs/2307.08691",
  "Kwon et al., PagedAttention (vLLM), SOSP 2023 — https://arxiv.org/abs/2309.06180",
  "vLLM triton_unified_attention.py — https://github.com/vllm-project/vllm/tree/main/vllm/attention/ops",
  "Triton tutorial: Fused Attention — https://triton-lang.org/main/getting-started/tutorials/06-fused-attention.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)"]

[h200]
status = "pending H200 run"
operator_score_pending = "not yet measured on the GPU (tiles to be tuned: measurements/unified_attention_tiles.py)"
+++
Sequence i owns query rows [a, b) = cu_seqlens_q[i : i+2] and kv_len = seqused_k[i] cached positions;
position p lives in k_cache/v_cache[block_table[i, p // bs], p % bs]. Query head h reads kv head
h // G (G = Hq / Hkv). Causal (query j sees keys 0..j) when b - a == kv_len, otherwise no mask.

FlashAttention-2 forward with three changes for this operator:

* GQA packing: a program owns BLOCK_Q query tokens of one sequence and all G query heads that share
  one kv head, as the BLOCK_M = BLOCK_Q·G rows of its tile (row m: token m // G, head m % G;
  BLOCK_Q = BLOCK_M // G, so G = 10 or 7 leaves 8 or 2 of 128 rows idle). Each K/V tile is
  gathered once for the whole group, and a causal tile spans few tokens, so less of the
  diagonal tile is masked-out work. The packed Q rows of one token are contiguous in memory.
* Varlen without a host sync: the grid is (N // BLOCK_Q + S, Hkv), an upper bound on the number
  of q tiles; each program finds its sequence by a binary search over cu_seqlens_q (tiles before
  sequence i number at most cu_seqlens_q[i] // BLOCK_Q + i) and surplus programs exit at once.
  Program ids run backwards so the longest causal tiles (the end of a long sequence) start first.
* Paged K/V: a BLOCK_N key tile covers BLOCK_N / 16 pages; each position's page comes from
  block_table and K/V rows are gathered from the cache viewed as (NB·bs, Hkv, D).

Causal: keys below the tile's first token are visible to every row and run in a mask-free loop;
only the last one or two key tiles (the diagonal) apply the per-row limit. Softmax in fp32 with
exp2 (log2 e folded into the scale), bf16 tensor-core dots, fp32 accumulators, one store per tile.
Head dims that are not powers of two are split into a power-of-two part and a small padded part
(72 = 64 + 16 with 8 masked, 80 = 64 + 16, 192 = 128 + 64), two dots each instead of padding to
128 or 256. Tile sizes per head dim and sequence regime (short or long) live in TILES.
"""

import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter multiplies bf16 tiles in tl.dot as raw integers (triton-lang/triton issue
# #11584): when interpreting, operands are widened to fp32 first.
_WIDEN_DOT = os.environ.get("TRITON_INTERPRET") == "1"
_LOG2E = 1.4426950408889634


class Tile(NamedTuple):
    """Launch choice for one head-dim class: rows (query tokens x packed heads), keys per step, warps, stages."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


# (padded head dim DA + DB, sequence regime) -> tile. Shared memory ~ 2·(BLOCK_M·D + num_stages·2·BLOCK_N·D)
# bytes stays under the H200's 228 KB per SM; D = 256 halves BLOCK_M to keep the fp32 accumulator in registers.
# Two warpgroups (8 warps) share the 128 rows: with 4 warps, D = 64/80 sit at 255 registers and D = 128 spills.
# "short": the batch's mean sequence length N / S (known without a sync) is at most SHORT_MEAN_LEN, so each
# program runs few key tiles and a smaller tile with two CTAs per SM may win; "long": single long prefills.
SHORT_MEAN_LEN = 512
TILES: dict[tuple[int, str], Tile] = {
    (64, "long"): Tile(128, 64, 8, 3),
    (64, "short"): Tile(128, 64, 8, 3),
    (80, "long"): Tile(128, 64, 8, 3),
    (80, "short"): Tile(128, 64, 8, 3),
    (128, "long"): Tile(128, 64, 8, 3),
    (128, "short"): Tile(128, 64, 8, 3),
    (192, "long"): Tile(128, 64, 8, 2),
    (192, "short"): Tile(128, 64, 8, 2),
    (256, "long"): Tile(64, 64, 8, 2),
    (256, "short"): Tile(64, 64, 8, 2),
}


def regime(n_tokens: int, num_seqs: int) -> str:
    """'short' when the mean sequence length is at most SHORT_MEAN_LEN: a shape-only test, no host sync."""
    return "short" if n_tokens <= SHORT_MEAN_LEN * num_seqs else "long"


def tile_for(head_dim: int, n_tokens: int, num_seqs: int) -> Tile:
    da, db = split_head_dim(head_dim)
    dims = sorted({d for d, _ in TILES})
    padded = min((d for d in dims if d >= da + db), default=dims[-1])
    return TILES[padded, regime(n_tokens, num_seqs)]


def split_head_dim(head_dim: int) -> tuple[int, int]:
    """(DA, DB): DA the largest power of two <= D, DB the power of two (>= 16, tl.dot's minimum) covering the rest."""
    da = 1 << (head_dim.bit_length() - 1)
    rest = head_dim - da
    return da, (max(16, triton.next_power_of_2(rest)) if rest else 0)


@triton.jit
def _mma(a, b, acc, WIDEN: tl.constexpr):
    if WIDEN:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def _find_sequence(cu_q_ptr, tile, num_seqs, BLOCK_Q: tl.constexpr):
    """Largest i < num_seqs with cu_q[i] // BLOCK_Q + i <= tile: the sequence whose q tiles contain `tile`
    (a tile past its sequence's end is a gap; its program exits)."""
    lo = 0
    hi = num_seqs - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tl.load(cu_q_ptr + mid) // BLOCK_Q + mid <= tile:
            lo = mid
        else:
            hi = mid - 1
    return lo


@triton.jit
def _attend(
    acc_a,
    acc_b,
    m_i,
    l_i,
    qa,
    qb,
    k_ptr,
    v_ptr,
    table_row_ptr,
    kv_head_off,
    row_limit,
    start,
    stop,
    kv_len,
    qk_scale,
    stride_slot,
    D: tl.constexpr,
    DA: tl.constexpr,
    DB: tl.constexpr,
    BS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    WIDEN: tl.constexpr,
):
    """Online softmax over key tiles [start, stop). MASKED: apply the per-row key limit and the kv_len
    bound (diagonal and tail tiles); otherwise every key of every tile is visible to every row."""
    da = tl.arange(0, DA)
    for n0 in range(start, stop, BLOCK_N):
        keys = n0 + tl.arange(0, BLOCK_N)
        if MASKED:
            key_ok = keys < kv_len
            page = tl.load(table_row_ptr + keys // BS, mask=key_ok, other=0).to(tl.int64)
        else:
            page = tl.load(table_row_ptr + keys // BS).to(tl.int64)
        row = (page * BS + keys % BS) * stride_slot + kv_head_off
        if MASKED:
            ka = tl.load(k_ptr + row[:, None] + da[None, :], mask=key_ok[:, None], other=0.0)
        else:
            ka = tl.load(k_ptr + row[:, None] + da[None, :])
        s = _mma(qa, tl.trans(ka), tl.zeros([BLOCK_M, BLOCK_N], tl.float32), WIDEN)
        if DB > 0:
            db = DA + tl.arange(0, DB)
            if MASKED:
                kb = tl.load(k_ptr + row[:, None] + db[None, :], mask=key_ok[:, None] & (db < D)[None, :], other=0.0)
            else:
                kb = tl.load(k_ptr + row[:, None] + db[None, :], mask=(db < D)[None, :], other=0.0)
            s = _mma(qb, tl.trans(kb), s, WIDEN)
        s = s * qk_scale
        if MASKED:
            s = tl.where(keys[None, :] <= row_limit[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if MASKED:
            va = tl.load(v_ptr + row[:, None] + da[None, :], mask=key_ok[:, None], other=0.0)
        else:
            va = tl.load(v_ptr + row[:, None] + da[None, :])
        p_low = p.to(va.dtype)
        acc_a = _mma(p_low, va, acc_a * alpha[:, None], WIDEN)
        if DB > 0:
            if MASKED:
                vb = tl.load(v_ptr + row[:, None] + db[None, :], mask=key_ok[:, None] & (db < D)[None, :], other=0.0)
            else:
                vb = tl.load(v_ptr + row[:, None] + db[None, :], mask=(db < D)[None, :], other=0.0)
            acc_b = _mma(p_low, vb, acc_b * alpha[:, None], WIDEN)
        m_i = m_new
    return acc_a, acc_b, m_i, l_i


@triton.jit
def _unified_attention(
    q_ptr,
    k_ptr,
    v_ptr,
    cu_q_ptr,
    kv_lens_ptr,
    table_ptr,
    out_ptr,
    qk_scale,
    num_seqs,
    Hq,
    Hkv,
    table_stride,
    G: tl.constexpr,
    D: tl.constexpr,
    DA: tl.constexpr,
    DB: tl.constexpr,
    BS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    WIDEN: tl.constexpr,
):
    tile = tl.num_programs(0) - 1 - tl.program_id(0)  # backwards: the longest causal tiles start first
    kvh = tl.program_id(1)
    seq = _find_sequence(cu_q_ptr, tile, num_seqs, BLOCK_Q)
    q_start = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    first = (tile - (q_start // BLOCK_Q + seq)) * BLOCK_Q  # position of the tile's first token in its sequence
    if first < q_len:
        kv_len = tl.load(kv_lens_ptr + seq)
        m = tl.arange(0, BLOCK_M)
        pos = first + m // G
        row_ok = (m < BLOCK_Q * G) & (pos < q_len)
        head = kvh * G + m % G
        q_row = ((q_start + pos).to(tl.int64) * Hq + head) * D
        da = tl.arange(0, DA)
        qa = tl.load(q_ptr + q_row[:, None] + da[None, :], mask=row_ok[:, None], other=0.0)
        acc_a = tl.zeros([BLOCK_M, DA], tl.float32)
        if DB > 0:
            db = DA + tl.arange(0, DB)
            qb = tl.load(q_ptr + q_row[:, None] + db[None, :], mask=row_ok[:, None] & (db < D)[None, :], other=0.0)
            acc_b = tl.zeros([BLOCK_M, DB], tl.float32)
        else:  # placeholders that _attend passes through untouched
            qb = qa
            acc_b = acc_a
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        last = tl.minimum(first + BLOCK_Q, q_len) - 1
        if q_len == kv_len:  # causal: keys <= the tile's first token are visible to all rows
            full_end = (first + 1) // BLOCK_N * BLOCK_N
            kv_end = last + 1
            row_limit = tl.minimum(pos, last)
        else:  # the reference drops the mask when q_len != kv_len
            full_end = kv_len // BLOCK_N * BLOCK_N
            kv_end = kv_len
            row_limit = tl.zeros([BLOCK_M], tl.int32) + (kv_len - 1)
        table_row_ptr = table_ptr + seq * table_stride
        stride_slot = Hkv * D
        kv_head_off = kvh * D
        acc_a, acc_b, m_i, l_i = _attend(
            acc_a,
            acc_b,
            m_i,
            l_i,
            qa,
            qb,
            k_ptr,
            v_ptr,
            table_row_ptr,
            kv_head_off,
            row_limit,
            0,
            full_end,
            kv_len,
            qk_scale,
            stride_slot,
            D,
            DA,
            DB,
            BS,
            BLOCK_M,
            BLOCK_N,
            False,
            WIDEN,
        )
        acc_a, acc_b, m_i, l_i = _attend(
            acc_a,
            acc_b,
            m_i,
            l_i,
            qa,
            qb,
            k_ptr,
            v_ptr,
            table_row_ptr,
            kv_head_off,
            row_limit,
            full_end,
            kv_end,
            kv_len,
            qk_scale,
            stride_slot,
            D,
            DA,
            DB,
            BS,
            BLOCK_M,
            BLOCK_N,
            True,
            WIDEN,
        )
        inv_l = 1.0 / tl.where(l_i > 0, l_i, 1.0)  # a row without keys (kv_len 0, unmasked) keeps acc = 0
        out_ty = out_ptr.dtype.element_ty
        tl.store(out_ptr + q_row[:, None] + da[None, :], (acc_a * inv_l[:, None]).to(out_ty), mask=row_ok[:, None])
        if DB > 0:
            db = DA + tl.arange(0, DB)
            tl.store(
                out_ptr + q_row[:, None] + db[None, :],
                (acc_b * inv_l[:, None]).to(out_ty),
                mask=row_ok[:, None] & (db < D)[None, :],
            )


def unified_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seqused_k: torch.Tensor,
    block_table: torch.Tensor,
    tile: Tile | None = None,
) -> torch.Tensor:
    """Launch with the head dim's tile from TILES, or with `tile` (the tuning script's override). No host sync:
    the grid comes from tensor shapes only."""
    n_tokens, hq, head_dim = q.shape
    block_size, hkv = k_cache.shape[1], k_cache.shape[2]
    num_seqs = seqused_k.shape[0]
    group = hq // hkv
    q = q.contiguous()
    out = torch.empty_like(q)  # every row of a valid batch is written: no memset (GBs at 792 K tokens)
    if n_tokens == 0 or num_seqs == 0:
        return out
    tile = tile or tile_for(head_dim, n_tokens, num_seqs)
    block_m = max(tile.block_m, triton.next_power_of_2(group))
    block_q = block_m // group
    da, db = split_head_dim(head_dim)
    table = block_table.contiguous()
    grid = (n_tokens // block_q + num_seqs, hkv)
    _unified_attention[grid](
        q,
        k_cache.contiguous(),
        v_cache.contiguous(),
        cu_seqlens_q.contiguous(),
        seqused_k.contiguous(),
        table,
        out,
        head_dim**-0.5 * _LOG2E,
        num_seqs,
        hq,
        hkv,
        table.shape[1],
        G=group,
        D=head_dim,
        DA=da,
        DB=db,
        BS=block_size,
        BLOCK_M=block_m,
        BLOCK_Q=block_q,
        BLOCK_N=tile.block_n,
        WIDEN=_WIDEN_DOT,
        num_warps=tile.num_warps,
        num_stages=tile.num_stages,
    )
    return out


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        seqused_k: torch.Tensor,
        block_table: torch.Tensor,
    ) -> torch.Tensor:
        return unified_attention(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table)
