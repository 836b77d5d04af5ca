"""
+++
title = "Fused MoE (bf16 SwiGLU experts): expert-sorted token blocks, two grouped GEMMs with fused epilogues"
operator = "fused_moe"
op_family = ["moe", "gemm"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["moe", "grouped gemm", "swiglu", "silu", "expert parallel", "token sorting", "align block size", "gather", "routing weights", "fp32 output", "device-side routing"]
sources = [
  "Shazeer et al., Sparsely-Gated Mixture-of-Experts, ICLR 2017 — https://arxiv.org/abs/1701.06538",
  "Gale et al., MegaBlocks: Efficient Sparse Training with Mixture-of-Experts (block-sparse grouping of tokens by expert), MLSys 2023 — https://arxiv.org/abs/2211.15841",
  "Triton tutorial: Grouped GEMM — https://triton-lang.org/main/getting-started/tutorials/08-grouped-gemm.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-11-30: measured on shapes [0] of 23 scored; 1 correct"]

[h200]
status = "measured on a subset of shapes"
date = "2026-11-30"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
shapes_measured = ["0"]
shapes_scored = 23
shapes_correct = 1
operator_score_pending = "S over the full shape set: pending; measured on shapes [0]"
median_time_ms = 0.669
median_dsl_share = 0.441
time_ms = { "0" = 0.669 }
failures = {}
+++
out[t] = Σ_s topk_weights[t, s] · W2[e] (silu(W1g[e] x_t) ⊙ W1u[e] x_t), e = topk_ids[t, s]; out fp32.

1. Routing, on the device and without a host sync: the T·k (token, slot) pairs are sorted by
   expert (stable), and each expert's run is padded to a multiple of BM with a sentinel, so
   every BM-row block belongs to one expert; `block_expert` says which. The block count is
   bounded by cdiv(T·k, BM) + E, so the grid is known without reading counts back; blocks
   past the real total exit at once.
2. GEMM 1 (per block × I-tile): gathers the block's token rows of x, multiplies by the
   expert's gate and up rows (two accumulators sharing the x tile), applies SiLU(g)·u in the
   epilogue and writes the activation (bf16) per pair.
3. GEMM 2 (per block × D-tile): activation @ W2[e]ᵀ, scaled by the pair's routing weight in
   the epilogue, written in fp32 per pair; a sum over the k slots gives out.

A token that picked the same expert twice is computed twice and summed (the reference merges
the weights first): equal up to fp32 rounding. The activation is rounded to bf16 between the
GEMMs (the reference keeps fp32) — a relative error of ~2^-9 per element, far inside the
tolerance, and what lets GEMM 2 run on bf16 tensor cores. BM follows the tokens per expert:
16 for decode (a few tokens per expert), up to 128 for prefill.
"""

import os

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter multiplies bf16 tiles in tl.dot as raw integers (triton-lang/triton issue
# #11584): when interpreting, operands are widened to fp32 first (exact for bf16 products).
_WIDEN_DOT = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _mma(a, b, acc, WIDEN: tl.constexpr):
    if WIDEN:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def _gate_up(
    x_ptr,
    w1_ptr,
    pair_ptr,
    block_expert_ptr,
    act_ptr,
    D,
    I,
    TOP_K,
    n_pairs,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    WIDEN: tl.constexpr,
):
    blk, pid_n = tl.program_id(0), tl.program_id(1)
    e = tl.load(block_expert_ptr + blk).to(tl.int64)
    if e >= 0:
        pairs = tl.load(pair_ptr + blk * BM + tl.arange(0, BM))
        live = pairs < n_pairs
        tokens = (pairs // TOP_K).to(tl.int64)
        rn = pid_n * BN + tl.arange(0, BN)
        n_ok = rn < I
        rk = tl.arange(0, BK)
        w_gate = w1_ptr + e * 2 * I * D + rn[:, None].to(tl.int64) * D
        w_up = w_gate + I * D
        g = tl.zeros((BM, BN), dtype=tl.float32)
        u = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, D, BK):
            k_ok = k0 + rk < D
            x = tl.load(x_ptr + tokens[:, None] * D + k0 + rk[None, :], mask=live[:, None] & k_ok[None, :], other=0.0)
            wg = tl.load(w_gate + k0 + rk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            wu = tl.load(w_up + k0 + rk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            g = _mma(x, tl.trans(wg), g, WIDEN)
            u = _mma(x, tl.trans(wu), u, WIDEN)
        act = g / (1.0 + tl.exp(-g)) * u
        tl.store(
            act_ptr + pairs[:, None].to(tl.int64) * I + rn[None, :],
            act.to(act_ptr.dtype.element_ty),
            mask=live[:, None] & n_ok[None, :],
        )


@triton.jit
def _down(
    act_ptr,
    w2_ptr,
    pair_ptr,
    block_expert_ptr,
    weight_ptr,
    y_ptr,
    D,
    I,
    n_pairs,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    WIDEN: tl.constexpr,
):
    blk, pid_n = tl.program_id(0), tl.program_id(1)
    e = tl.load(block_expert_ptr + blk).to(tl.int64)
    if e >= 0:
        pairs = tl.load(pair_ptr + blk * BM + tl.arange(0, BM))
        live = pairs < n_pairs
        rows = pairs.to(tl.int64)
        rn = pid_n * BN + tl.arange(0, BN)
        n_ok = rn < D
        rk = tl.arange(0, BK)
        w = w2_ptr + e * D * I + rn[:, None].to(tl.int64) * I
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, I, BK):
            k_ok = k0 + rk < I
            a = tl.load(act_ptr + rows[:, None] * I + k0 + rk[None, :], mask=live[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(w + k0 + rk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            acc = _mma(a, tl.trans(b), acc, WIDEN)
        acc = acc * tl.load(weight_ptr + rows, mask=live, other=0.0)[:, None]
        tl.store(y_ptr + rows[:, None] * D + rn[None, :], acc, mask=live[:, None] & n_ok[None, :])


def _route(topk_ids: torch.Tensor, n_experts: int, bm: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pair indices grouped by expert, each expert padded to a multiple of bm with the sentinel
    n_pairs, and the expert of every bm-row block (-1 past the end) — all on the device."""
    flat = topk_ids.reshape(-1).long()
    n_pairs = flat.numel()
    expert_sorted, order = torch.sort(flat, stable=True)
    counts = torch.bincount(flat, minlength=n_experts)
    padded = (counts + bm - 1) // bm * bm
    start = torch.cumsum(counts, 0) - counts
    pad_end = torch.cumsum(padded, 0)
    dest = (pad_end - padded)[expert_sorted] + torch.arange(n_pairs, device=flat.device) - start[expert_sorted]
    n_blocks = triton.cdiv(n_pairs, bm) + n_experts
    pair_ids = torch.full((n_blocks * bm,), n_pairs, dtype=torch.int32, device=flat.device)
    pair_ids[dest] = order.to(torch.int32)
    block_start = torch.arange(n_blocks, device=flat.device) * bm
    block_expert = torch.searchsorted(pad_end, block_start, right=True)
    block_expert = torch.where(block_expert < n_experts, block_expert, -1).to(torch.int32)
    return pair_ids, block_expert


class Model(torch.nn.Module):
    def __init__(self, *, num_experts: int, intermediate_size: int, top_k: int):
        super().__init__()
        self.num_experts, self.intermediate_size, self.top_k = int(num_experts), int(intermediate_size), int(top_k)

    def forward(
        self,
        hidden_states: torch.Tensor,
        w1: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
    ) -> torch.Tensor:
        x, w1, w2 = hidden_states.contiguous(), w1.contiguous(), w2.contiguous()
        T, D = x.shape
        E, I = w1.shape[0], w1.shape[1] // 2
        k = topk_ids.shape[1]
        n_pairs = T * k
        per_expert = n_pairs / E
        bm = 16 if per_expert <= 16 else 64 if per_expert <= 256 else 128
        pair_ids, block_expert = _route(topk_ids, E, bm)
        act = torch.empty((n_pairs, I), dtype=x.dtype, device=x.device)
        y = torch.empty((n_pairs, D), dtype=torch.float32, device=x.device)
        warps = 4 if bm <= 64 else 8
        _gate_up[(block_expert.numel(), triton.cdiv(I, 64))](
            x,
            w1,
            pair_ids,
            block_expert,
            act,
            D,
            I,
            k,
            n_pairs,
            BM=bm,
            BN=64,
            BK=64,
            WIDEN=_WIDEN_DOT,
            num_warps=warps,
            num_stages=3,
        )
        _down[(block_expert.numel(), triton.cdiv(D, 128))](
            act,
            w2,
            pair_ids,
            block_expert,
            topk_weights.float().contiguous().reshape(-1),
            y,
            D,
            I,
            n_pairs,
            BM=bm,
            BN=128,
            BK=64,
            WIDEN=_WIDEN_DOT,
            num_warps=warps,
            num_stages=3,
        )
        return y.view(T, k, D).sum(dim=1)
