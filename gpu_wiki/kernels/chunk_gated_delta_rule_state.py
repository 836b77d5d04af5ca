"""
+++
title = "Chunked gated delta rule, state pass: state columns split across programs, chunks walked in registers on tensor cores, pool copy fused into the same launch"
operator = "chunk_gated_delta_rule_state"
op_family = ["linear-attention"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["gated delta rule", "gated deltanet", "linear attention", "chunked", "WY representation", "UT transform", "chunk state", "v_new", "state pool", "recurrence", "tl.dot", "fused copy", "persistent copy", "qwen3-next"]
sources = [
  "Yang, Kautz, Hatamizadeh, Gated Delta Networks: Improving Mamba2 with Delta Rule, ICLR 2025 — https://arxiv.org/abs/2412.06464",
  "Yang et al., Parallelizing Linear Transformers with the Delta Rule over Sequence Length, NeurIPS 2024 — https://arxiv.org/abs/2406.06484",
  "flash-linear-attention, chunk_gated_delta_rule_fwd_h kernel — https://github.com/fla-org/flash-linear-attention/blob/main/fla/ops/common/chunk_delta_h.py",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 25/25 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19", "20", "21", "22", "23", "24"]
shapes_scored = 25
shapes_correct = 25
operator_score = 0.545
median_time_ms = 0.436
median_dsl_share = 1
time_ms = { "0" = 0.0725, "1" = 0.412, "2" = 0.52, "3" = 0.562, "4" = 0.645, "5" = 0.697, "6" = 0.652, "7" = 0.783, "8" = 0.103, "9" = 0.151, "10" = 0.247, "11" = 0.436, "12" = 0.626, "13" = 0.33, "14" = 0.63, "15" = 0.145, "16" = 0.159, "17" = 0.391, "18" = 0.739, "19" = 0.267, "20" = 0.426, "21" = 0.37, "22" = 0.485, "23" = 1.57, "24" = 1.93 }
failures = {}
+++
The state stage of the chunked (WY-form) gated delta rule: w and u = the WY/UT-transformed keys
and values are inputs, so per batch b, value head j and chunk c (C = 64 rows, the last may be
short) with St the fp32 state (K × V) from pool slot initial_state_indices[b]:
h[b, c, j] = bf16(St); Vn = U_c − W_c·bf16(St); v_new = bf16(Vn); γ = G_c[last];
Vs = bf16(Vn ⊙ f) with f_i = exp(γ − G_i) if γ − G_i ≤ 0 else 0; St ← St·exp(γ) + K_cᵀ·Vs.
final_state = the pool with the touched slots replaced by St.

The chunk recurrence is sequential, but every column of St evolves on its own (both products
act column-wise), so the recurrence programs are (B·Hv) × (V / BV): each keeps a [K, BV] fp32
slice of St in registers across ALL chunks and per chunk does two bf16 tensor-core dots with
fp32 accumulation, W_c·bf16(St) ([C, K]·[K, BV]) and K_cᵀ·Vs ([K, C]·[C, BV]). W_c, K_c and g
are shared by the V / BV programs of a head through L2. Bf16 products are exact in fp32, so
the result differs from the reference only by fp32 summation order.

The output pool (up to 1116 × 32 × 128 × 128 fp32 = 2.3 GB) must be a copy: that copy, not
the recurrence, is most of the memory traffic. It is done by extra programs of the SAME
launch (program ids past the recurrence programs), each copying (slot, head) tiles in a
grid-stride loop and skipping the slots the recurrence writes. The few recurrence programs
(8–128) are latency bound and the copy is bandwidth bound, so they overlap instead of the
copy running before the recurrence as a separate framework `clone`, which would also put
most of the device time outside the DSL. Tile table: BV = 16 when B·Hv ≤ 8 (more programs for
few heads), else 32. num_stages = 2: the next chunk's w, k, u, g are prefetched while the current
one's dots run (they do not depend on the state); deeper pipelines only take shared memory, which
the copy programs of the same launch share (it bounds how many fit on an SM).
"""

import os

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter multiplies bf16 tiles in tl.dot as raw integers (triton-lang/triton issue
# #11584) and truncates fp32 -> bf16: when interpreting, operands are widened to fp32 first (exact for
# bf16 products) and roundings are done on the bits (`_bf16`).
_WIDEN_DOT = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _mma(a, b, WIDEN: tl.constexpr):
    if WIDEN:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _bf16(x, WIDEN: tl.constexpr):
    """fp32 -> bf16, round to nearest even. The interpreter truncates instead, so when interpreting the
    rounding is done on the bits first (exactly representable afterwards); on the GPU it is the cast."""
    if WIDEN:
        bits = x.to(tl.int32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
        x = bits.to(tl.float32, bitcast=True)
    return x.to(tl.bfloat16)


@triton.jit
def _state_pass(
    k_ptr,
    w_ptr,
    u_ptr,
    g_ptr,
    pool_ptr,
    idx_ptr,
    h_ptr,
    vnew_ptr,
    final_ptr,
    B,
    T,
    HK,
    HV,
    NC,
    ratio,
    units,
    recur_programs,
    copy_programs,
    C: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BV: tl.constexpr,
    BLOCK_B: tl.constexpr,
    COPY: tl.constexpr,
    WIDEN: tl.constexpr,
):
    pid = tl.program_id(0)
    kk = tl.arange(0, K)
    if pid < recur_programs:
        col_blocks = V // BV
        bh = pid // col_blocks
        b = (bh // HV).to(tl.int64)
        j = bh % HV
        kh = tl.minimum(j // ratio, HK - 1)
        cols = (pid % col_blocks) * BV + tl.arange(0, BV)
        slot = tl.load(idx_ptr + b).to(tl.int64)
        st_off = ((slot * HV + j) * K + kk[:, None]) * V + cols[None, :]
        state = tl.load(pool_ptr + st_off)  # [K, BV] fp32
        r = tl.arange(0, C)
        for c in range(0, NC):
            rows = c * C + r
            live = rows < T
            tok = b * T + rows
            last = b * T + tl.minimum(c * C + C, T) - 1
            state_bf = _bf16(state, WIDEN)
            tl.store(h_ptr + (((b * NC + c) * HV + j) * K + kk[:, None]) * V + cols[None, :], state_bf)
            wc = tl.load(w_ptr + (tok[:, None] * HV + j) * K + kk[None, :], mask=live[:, None], other=0.0)
            uc = tl.load(u_ptr + (tok[:, None] * HV + j) * V + cols[None, :], mask=live[:, None], other=0.0)
            vn = uc.to(tl.float32) - _mma(wc, state_bf, WIDEN)  # [C, BV] fp32
            tl.store(vnew_ptr + (tok[:, None] * HV + j) * V + cols[None, :], _bf16(vn, WIDEN), mask=live[:, None])
            gc = tl.load(g_ptr + tok * HV + j, mask=live, other=0.0)
            gamma = tl.load(g_ptr + last * HV + j)
            gap = gamma - gc
            factor = tl.where((gap <= 0) & live, tl.exp(gap), 0.0)
            vs = _bf16(vn * factor[:, None], WIDEN)
            kc = tl.load(k_ptr + (tok[:, None] * HK + kh) * K + kk[None, :], mask=live[:, None], other=0.0)
            state = state * tl.exp(gamma) + _mma(tl.trans(kc), vs, WIDEN)  # [K, BV]
        tl.store(final_ptr + st_off, state)
    else:
        # Pool copy: (slot, head) tiles of K x V, grid-stride, touched slots left to the recurrence.
        bb = tl.arange(0, BLOCK_B)
        touched = tl.load(idx_ptr + bb, mask=bb < B, other=-1)
        n = tl.arange(0, COPY)
        tile = (pid * 0 + K * V).to(tl.int64)  # 64-bit offsets into the pool
        for unit in range(pid - recur_programs, units, copy_programs):
            slot = unit // HV
            if tl.sum((touched == slot).to(tl.int32), axis=0) == 0:
                base = unit * tile
                for start in range(0, K * V, COPY):
                    tl.store(final_ptr + base + start + n, tl.load(pool_ptr + base + start + n))


def _column_block(heads: int, value_dim: int) -> int:
    """BV: narrower column slices when there are few (batch, head) pairs to spread the recurrence."""
    return min(16 if heads <= 8 else 32, value_dim)


def _copy_programs(device: torch.device) -> int:
    if device.type != "cuda":
        return 4
    return 4 * torch.cuda.get_device_properties(device).multi_processor_count


class Model(torch.nn.Module):
    def __init__(self, *, chunk_size: int = 64):
        super().__init__()
        self.chunk_size = int(chunk_size)
        self.column_block = None  # None: the tile table; an int overrides it (tile sweeps)

    def forward(self, k, w, u, g, initial_state, initial_state_indices) -> dict[str, torch.Tensor]:
        B, T, HK, K = k.shape
        HV, V = u.shape[2], u.shape[3]
        S = initial_state.shape[0]
        C = self.chunk_size
        NC = triton.cdiv(T, C)
        pool = initial_state.contiguous()
        h = torch.empty((B, NC, HV, K, V), dtype=torch.bfloat16, device=k.device)
        v_new = torch.empty((B, T, HV, V), dtype=torch.bfloat16, device=k.device)
        final_state = torch.empty_like(pool)
        bv = self.column_block or _column_block(B * HV, V)
        recur = B * HV * (V // bv)
        units = S * HV
        copiers = min(_copy_programs(k.device), units)
        _state_pass[(recur + copiers,)](
            k.contiguous(),
            w.contiguous(),
            u.contiguous(),
            g.contiguous(),
            pool,
            initial_state_indices.contiguous(),
            h,
            v_new,
            final_state,
            B,
            T,
            HK,
            HV,
            NC,
            max(HV // HK, 1),
            units,
            recur,
            copiers,
            C=C,
            K=K,
            V=V,
            BV=bv,
            BLOCK_B=triton.next_power_of_2(B),
            COPY=min(8192, K * V),
            WIDEN=_WIDEN_DOT,
            num_warps=4,
            num_stages=2,
        )
        return {"h": h, "v_new": v_new, "final_state": final_state}
