"""
+++
title = "Per-token-group fp8 e4m3fn quantisation (groups of 128) with IEEE-exact scales"
operator = "per_token_group_quant_fp8"
op_family = ["quant"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["fp8", "e4m3fn", "quantisation", "per-group", "group_size 128", "amax", "scale", "div_rn", "clamp", "memory-bound", "deepseek"]
sources = [
  "DeepSeek-V3 Technical Report, fine-grained (1x128 tile-wise) activation quantisation — https://arxiv.org/abs/2412.19437",
  "Micikevicius et al., FP8 Formats for Deep Learning, 2022 — https://arxiv.org/abs/2209.05433",
  "Triton API: tl.div_rn (IEEE round-to-nearest division) — https://triton-lang.org/main/python-api/generated/triton.language.div_rn.html",
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
operator_score = 0.397
median_time_ms = 0.235
median_dsl_share = 1
time_ms = { "0" = 0.00406, "1" = 0.214, "2" = 0.278, "3" = 0.235, "4" = 0.342, "5" = 0.535, "6" = 0.969, "7" = 2.17, "8" = 4.19, "9" = 6.23, "10" = 0.0056, "11" = 0.0122, "12" = 0.0144, "13" = 0.0231, "14" = 0.109, "15" = 0.163, "16" = 0.159, "17" = 0.461, "18" = 0.65 }
failures = {}
+++
For each row and each group of G = 128 consecutive columns:
scale = max(amax(|x|) / 448, 1e-10); q = e4m3fn(clamp(x / scale, -448, 448)).
Outputs: {"quantized": (T, H) float8_e4m3fn, "scales": (T, H/G) fp32}.

fp8 outputs are compared code by code, so the arithmetic is the reference's exactly: the
group maximum in fp32, IEEE division for the scale and for every quotient (`tl.div_rn`;
Triton's `/` on fp32 lowers to the approximate `div.full.f32` on NVIDIA GPUs), clamp, then
the round-to-nearest-even cast (done as an explicit rounding to the e4m3 grid in fp32, see
`_round_to_e4m3_grid`, because the Triton CPU interpreter's own fp8 cast mis-rounds).
A program handles ROWS rows × one 2048-column span (16 groups) as a [ROWS, 16, 128] tile
reshaped from a 2-D load, so both loads and stores stay contiguous and vectorised; rows are int64-indexed (T·H reaches 2.2e10 elements here).
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
def _group_quant(x_ptr, q_ptr, s_ptr, n_rows, H, n_groups, ROWS: tl.constexpr, GROUPS: tl.constexpr, G: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    g0 = tl.program_id(1) * GROUPS
    cols = g0 * G + tl.arange(0, GROUPS * G)
    mask = (rows < n_rows)[:, None] & (cols < H)[None, :]
    x = tl.load(x_ptr + rows[:, None] * H + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    xg = tl.reshape(x, (ROWS, GROUPS, G))
    scale = tl.maximum(tl.div_rn(tl.max(tl.abs(xg), axis=2), 448.0), 1e-10)  # [ROWS, GROUPS]
    q = tl.clamp(tl.div_rn(xg, scale[:, :, None]), -448.0, 448.0)
    q = _round_to_e4m3_grid(tl.reshape(q, (ROWS, GROUPS * G)), -6).to(q_ptr.dtype.element_ty)
    tl.store(q_ptr + rows[:, None] * H + cols[None, :], q, mask=mask)
    gidx = g0 + tl.arange(0, GROUPS)
    tl.store(
        s_ptr + rows[:, None] * n_groups + gidx[None, :],
        scale,
        mask=(rows < n_rows)[:, None] & (gidx < n_groups)[None, :],
    )


class Model(torch.nn.Module):
    def __init__(self, *, group_size: int = 128):
        super().__init__()
        self.group_size = group_size

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        H, G = x.shape[-1], self.group_size
        x2 = x.reshape(-1, H).contiguous()
        n_rows, n_groups = x2.shape[0], H // G
        q = torch.empty((n_rows, H), dtype=torch.float8_e4m3fn, device=x.device)
        scales = torch.empty((n_rows, n_groups), dtype=torch.float32, device=x.device)
        groups = min(16, triton.next_power_of_2(n_groups))
        rows = max(1, 2048 // (groups * G))
        grid = (triton.cdiv(n_rows, rows), triton.cdiv(n_groups, groups))
        _group_quant[grid](x2, q, scales, n_rows, H, n_groups, ROWS=rows, GROUPS=groups, G=G, num_warps=4)
        return {"quantized": q.view(*x.shape), "scales": scales.view(*x.shape[:-1], n_groups)}
