"""
+++
title = "MoE sum-reduce: sum the top-k expert outputs of each token in fp32, then scale"
operator = "moe_sum_reduce"
op_family = ["moe"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["moe", "sum reduce", "top-k combine", "reduction over k", "memory-bound", "bf16"]
sources = [
  "Fedus, Zoph, Shazeer, Switch Transformers (combining expert outputs), JMLR 2022 — https://arxiv.org/abs/2101.03961",
  "Triton tutorial: Vector Addition — https://triton-lang.org/main/getting-started/tutorials/01-vector-add.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 7/7 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4", "5", "6"]
shapes_scored = 7
shapes_correct = 7
operator_score = 0.373
median_time_ms = 0.116
median_dsl_share = 1
time_ms = { "0" = 0.094, "1" = 0.103, "2" = 0.123, "3" = 0.0931, "4" = 0.154, "5" = 0.18, "6" = 0.116 }
failures = {}
+++
out[t] = bf16((sum_s fp32(x[t, s, :])) * factor) for x of shape (T, k, H).

Memory-bound: reads k·H, writes H bf16 values per token. A program owns one token and a
BLOCK_H column chunk and loops over the k slots with a statically unrolled loop
(`tl.static_range`, k = 8), so the k loads are independent and in flight together. The
multiply by the factor happens after the fp32 sum, as in the reference.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _moe_sum_reduce(x_ptr, out_ptr, H, factor, K: tl.constexpr, BLOCK_H: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = cols < H
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    for s in tl.static_range(K):
        acc += tl.load(x_ptr + (token * K + s) * H + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + token * H + cols, (acc * factor).to(out_ptr.dtype.element_ty), mask=mask)


class Model(torch.nn.Module):
    def __init__(self, *, routed_scaling_factor: float = 1.0):
        super().__init__()
        self.routed_scaling_factor = float(routed_scaling_factor)

    def forward(self, expert_outputs: torch.Tensor) -> torch.Tensor:
        x = expert_outputs.contiguous()
        T, K, H = x.shape
        out = torch.empty((T, H), dtype=x.dtype, device=x.device)
        block_h = min(1024, triton.next_power_of_2(H))
        _moe_sum_reduce[(T, triton.cdiv(H, block_h))](
            x, out, H, self.routed_scaling_factor, K=K, BLOCK_H=block_h, num_warps=4
        )
        return out
