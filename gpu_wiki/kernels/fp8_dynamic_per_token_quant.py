"""
+++
title = "Dynamic per-token fp8 e4m3fnuz quantisation on an NVIDIA GPU (codes built from e4m3fn)"
operator = "fp8_dynamic_per_token_quant"
op_family = ["quant"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["fp8", "e4m3fnuz", "e4m3fn", "quantisation", "per-token", "reciprocal", "bitcast", "code conversion", "memory-bound"]
sources = [
  "Micikevicius et al., FP8 Formats for Deep Learning, 2022 — https://arxiv.org/abs/2209.05433",
  "PyTorch float8 dtypes (float8_e4m3fn, float8_e4m3fnuz) — https://pytorch.org/docs/stable/tensors.html",
  "Triton API: tl.div_rn, tensor.to(bitcast=True) — https://triton-lang.org/main/python-api/triton.language.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)"]

[h200]
status = "pending H200 run"
+++
Per row: scale = max(amax|x|, 1e-12) / 240; inv = 1 / scale (IEEE reciprocal);
q = e4m3fnuz(clamp(x * inv, -240, 240)). Returns (q (T, H) float8_e4m3fnuz, scale (T,) fp32).

e4m3fnuz (bias 8, max 240, no -0, NaN = 0x80) has no native conversion on NVIDIA GPUs.
Its codes are those of e4m3fn (bias 7) for twice the value: for |v| ≤ 224, the fnuz code of v
is the fn code of 2v (exact scaling by 2; subnormals line up too). So the kernel first
rounds v to the fnuz grid in fp32 (`_round_to_e4m3_grid` with minimum exponent -7, ties to
even), then converts the exact value 2v to e4m3fn. Two edges are fixed by hand: 240 (2v =
480 is not an e4m3fn value) is code 0x7F, and a zero result has code 0x00, never 0x80
(fnuz's NaN). The kernel stores uint8 codes; the host views them as float8_e4m3fnuz
(no copy). Scale arithmetic uses `tl.div_rn` for the IEEE quotient and reciprocal.
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
    e = tl.maximum(((bits >> 23) & 0xFF) - 127, MIN_EXP) - 3          # exponent of one ulp
    ulp = ((e + 127) << 23).to(tl.float32, bitcast=True)
    inv_ulp = ((127 - e) << 23).to(tl.float32, bitcast=True)
    r = ((tl.abs(v) * inv_ulp + 12582912.0) - 12582912.0) * ulp         # + 1.5 * 2^23: round to integer, ties to even
    return (r.to(tl.int32, bitcast=True) | (bits & -2147483648)).to(tl.float32, bitcast=True)


@triton.jit
def _per_token_fnuz(x_ptr, q_ptr, s_ptr, H, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32)
    scale = tl.div_rn(tl.maximum(tl.max(tl.abs(x), axis=0), 1e-12), 240.0)
    inv = tl.div_rn(1.0, scale)
    v = _round_to_e4m3_grid(tl.clamp(x * inv, -240.0, 240.0), -7)      # fnuz grid: bias 8
    fn_code = (v * 2.0).to(tl.float8e4nv).to(tl.uint8, bitcast=True)    # exact: 2v is an e4m3fn value
    magnitude = tl.where(tl.abs(v) == 240.0, 0x7F, fn_code & 0x7F)
    sign = tl.where((v < 0) & (magnitude != 0), 0x80, 0)
    tl.store(q_ptr + row * H + cols, (magnitude | sign).to(tl.uint8), mask=mask)
    tl.store(s_ptr + row, scale)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        H = x.shape[-1]
        x2 = x.reshape(-1, H).contiguous()
        codes = torch.empty(x2.shape, dtype=torch.uint8, device=x.device)
        scale = torch.empty(x2.shape[0], dtype=torch.float32, device=x.device)
        block_h = triton.next_power_of_2(H)
        _per_token_fnuz[(x2.shape[0],)](x2, codes, scale, H, BLOCK_H=block_h, num_warps=8 if block_h >= 4096 else 4)
        return codes.view(torch.float8_e4m3fnuz).view(x.shape), scale.view(x.shape[:-1])
