"""
+++
title = "Depthwise causal conv1d (width 4) + SiLU over a channel-major sequence, state as history"
operator = "causal_conv1d"
op_family = ["conv"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["causal conv1d", "depthwise", "mamba", "gated deltanet", "short convolution", "silu", "sliding window", "initial state", "memory-bound", "bf16"]
sources = [
  "Gu & Dao, Mamba: Linear-Time Sequence Modeling with Selective State Spaces (short causal conv), 2023 — https://arxiv.org/abs/2312.00752",
  "Yang, Kautz, Hatamizadeh, Gated Delta Networks, ICLR 2025 — https://arxiv.org/abs/2412.06464",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 9/9 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4", "5", "6", "7", "8"]
shapes_scored = 9
shapes_correct = 9
operator_score = 0.129
median_time_ms = 0.0132
median_dsl_share = 1
time_ms = { "0" = 0.00963, "1" = 0.00573, "2" = 0.00672, "3" = 0.018, "4" = 0.0132, "5" = 0.00963, "6" = 0.215, "7" = 0.584, "8" = 0.772 }
failures = {}
+++
X' = [initial_state[0, :, -(W-1):] | x] along time (x is (Dm, T), channels first);
y[d, t] = bf16(bias[d] + Σ_j weight[d, j]·X'[d, t + j]); out = bf16(silu(y)).

A program owns a [BLOCK_D, BLOCK_T] tile. For each of the W taps it loads the tile shifted
by j − (W−1) in time; positions before 0 come from the last W−1 columns of the state,
selected with a mask, so no padded copy of x is ever built. The
shifted loads overlap and hit L1/L2: HBM traffic stays ≈ one read of x and one write of out.
8 warps keep the W shifted [BLOCK_D, BLOCK_T] loads and their 64-bit addresses in registers
(4 warps spill on sm_90). The accumulation order is the reference's (bias first, then taps 0..W−1, fp32), and y is
rounded to bf16 before the SiLU, as the reference does.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _causal_conv1d(
    x_ptr,
    w_ptr,
    b_ptr,
    st_ptr,
    out_ptr,
    D,
    T,
    ST_LEN,
    W: tl.constexpr,
    SILU: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    d = tl.program_id(0) * BLOCK_D + tl.arange(0, BLOCK_D)[:, None]
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)[None, :]
    d_ok = d < D
    acc = tl.load(b_ptr + d, mask=d_ok, other=0.0).to(tl.float32) + tl.zeros((BLOCK_D, BLOCK_T), tl.float32)
    for j in tl.static_range(W):
        src_t = t + j - (W - 1)  # time index into x; < 0 means history
        from_x = tl.load(x_ptr + d.to(tl.int64) * T + src_t, mask=d_ok & (src_t >= 0) & (src_t < T), other=0.0)
        hist_col = ST_LEN + src_t  # last W-1 state columns
        from_state = tl.load(st_ptr + d * ST_LEN + hist_col, mask=d_ok & (src_t < 0) & (hist_col >= 0), other=0.0)
        xv = tl.where(src_t < 0, from_state, from_x).to(tl.float32)
        acc = acc + tl.load(w_ptr + d * W + j, mask=d_ok, other=0.0).to(tl.float32) * xv
    y = acc.to(out_ptr.dtype.element_ty)
    if SILU:
        yf = y.to(tl.float32)
        y = (yf / (1.0 + tl.exp(-yf))).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + d.to(tl.int64) * T + t, y, mask=d_ok & (t < T))


class Model(torch.nn.Module):
    def __init__(self, *, activation: str | None = "silu"):
        super().__init__()
        if activation not in (None, "silu", "swish"):
            raise ValueError(f"activation must be None, 'silu' or 'swish', got {activation!r}")
        self.silu = activation is not None

    def forward(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, initial_state: torch.Tensor
    ) -> torch.Tensor:
        dtype = weight.dtype
        x = x.to(dtype).contiguous()
        state = initial_state[0].to(dtype).contiguous()  # (Dm, S) with S >= W - 1
        D, T = x.shape
        W = weight.shape[1]
        out = torch.empty_like(x)
        block_t = min(128, triton.next_power_of_2(T))
        block_d = max(1, 4096 // block_t)
        grid = (triton.cdiv(D, block_d), triton.cdiv(T, block_t))
        _causal_conv1d[grid](
            x,
            weight.contiguous(),
            bias,
            state,
            out,
            D,
            T,
            state.shape[1],
            W=W,
            SILU=self.silu,
            BLOCK_D=block_d,
            BLOCK_T=block_t,
            num_warps=8,
        )
        return out
