"""
+++
title = "fp8 block-scaled GEMM (1x128 activation, 128x128 weight scales), fp8 codes widened to fp16 for exact fp32 accumulation"
operator = "block_scaled_mm"
op_family = ["gemm", "quant"]
dsl = ["triton"]
hardware = ["hopper"]
tags = ["fp8", "e4m3fn", "gemm", "block scaling", "deepseek", "tl.dot", "wgmma", "fp16 upcast", "max_num_imprecise_acc", "fp8 fast accumulation", "accumulation precision", "fp32 output", "grouped ordering", "compute-bound"]
sources = [
  "DeepSeek-V3 Technical Report, §3.3 fine-grained quantisation and increased accumulation precision — https://arxiv.org/abs/2412.19437",
  "Triton tutorial: Matrix Multiplication — https://triton-lang.org/main/getting-started/tutorials/03-matrix-multiplication.html",
  "Triton API: triton.language.dot (max_num_imprecise_acc) — https://triton-lang.org/main/python-api/generated/triton.language.dot.html",
  "PTX ISA: wgmma.mma_async operand types and accumulation — https://docs.nvidia.com/cuda/parallel-thread-execution/",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 24/24 scored shapes correct"]
gpu_note = "failed on H200 2026-11-30 at shape 0: numeric_mismatch (43 of 714752 outputs outside tolerance, max abs error 0.040); fixed by widening the fp8 tiles to fp16 before tl.dot, so each 128-wide K block accumulates in full fp32 instead of Hopper's reduced-precision fp8 accumulation; re-validated: 24/24 shapes correct over 5 seeds in the full-set judgement (H200 2026-12-02)"

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19", "20", "21", "22", "23"]
shapes_scored = 24
shapes_correct = 24
operator_score = 0.147
median_time_ms = 2.32
median_dsl_share = 1
time_ms = { "0" = 0.0388, "1" = 0.0377, "2" = 0.16, "3" = 0.22, "4" = 0.579, "5" = 1.41, "6" = 1.79, "7" = 2.7, "8" = 3.25, "9" = 6.85, "10" = 14.1, "11" = 19.2, "12" = 0.0716, "13" = 0.382, "14" = 0.507, "15" = 1.01, "16" = 1.95, "17" = 2.89, "18" = 5.76, "19" = 7.66, "20" = 11.5, "21" = 15.3, "22" = 30, "23" = 34.6 }
failures = {}
+++
out[m, n] = Σ_j (P_j[m, n] · a_scales[m, j]) · b_scales[n // 128, j], with P_j the fp32 product of
the fp8 codes over K-block j (128 wide); out is fp32, b is stored (N, K).

Each program computes a BM × BN tile. The K loop steps exactly one scale block (BK = 128 =
group_k). The two fp8 tiles are widened to fp16 — exact: every e4m3fn value is an fp16 value —
and `tl.dot` of the fp16 tiles gives P_j on the tensor cores with full fp32 accumulation (the
products of fp8 codes are exact in fp32). P_j is then scaled — first by the per-row activation
scale, then by the tile's single weight scale (BN divides 128, so a tile never straddles two
weight scale rows) — and added to an fp32 accumulator. Scaling per K block is required for
correctness (scales differ between blocks).

Why not fp8 `tl.dot`: on Hopper, Triton compiles an fp8 × fp8 → fp32 dot to fp8 wgmma whose
accumulator keeps only about 14 bits (max_num_imprecise_acc defaults to 2^30 on sm_90, i.e.
never promote). The first version of this kernel used it, restarted every 128-wide K block; the
error (≈1e-3 of the output scale) still put a few near-zero outputs outside the evaluator's
absolute tolerance on the H200.
`max_num_imprecise_acc=32` promotes after every wgmma but still accumulates 32 products in
reduced precision; `max_num_imprecise_acc=0` makes Triton drop to mma.sync on fp16. Widening
to fp16 is lossless and keeps wgmma (m64nNk16, f16 operands, fp32 accumulate), at half the fp8
peak rate — the price of matching an fp32-accumulated reference element by element.
Grouped program order keeps a band of `a` and `b` tiles hot in L2. Row and output offsets are
int64 (M·N reaches 2.9e9).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _block_scaled_mm(
    a_ptr,
    b_ptr,
    as_ptr,
    bs_ptr,
    c_ptr,
    M,
    N,
    K,
    n_kb,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_N: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    n_m, n_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    width = GROUP_M * n_n
    first_m = (pid // width) * GROUP_M
    size_m = tl.minimum(n_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m

    rm = (pid_m * BM + tl.arange(0, BM)).to(tl.int64)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    m_ok, n_ok = rm < M, rn < N
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rn[:, None].to(tl.int64) * K + rk[None, :]
    b_scale_row = bs_ptr + ((pid_n * BN) // GROUP_N) * n_kb
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for j in range(0, n_kb):
        a = tl.load(a_ptrs, mask=m_ok[:, None], other=0.0).to(tl.float16)
        b = tl.load(b_ptrs, mask=n_ok[:, None], other=0.0).to(tl.float16)
        partial = tl.dot(a, tl.trans(b))  # fp16 wgmma, fp32 accumulation; never fp8 × fp8 here (see above)
        a_s = tl.load(as_ptr + rm * n_kb + j, mask=m_ok, other=0.0)
        acc += (partial * a_s[:, None]) * tl.load(b_scale_row + j)
        a_ptrs += BK
        b_ptrs += BK
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=m_ok[:, None] & n_ok[None, :])


class Model(torch.nn.Module):
    def __init__(self, *, group_n: int = 128, group_k: int = 128):
        super().__init__()
        self.group_n, self.group_k = group_n, group_k

    def forward(self, a: torch.Tensor, b: torch.Tensor, a_scales: torch.Tensor, b_scales: torch.Tensor) -> torch.Tensor:
        a, b = a.contiguous(), b.contiguous()
        a_scales, b_scales = a_scales.contiguous(), b_scales.contiguous()
        M, K = a.shape
        N = b.shape[0]
        out = torch.empty((M, N), dtype=torch.float32, device=a.device)
        bm = 128 if M > 64 else 64
        bn = min(128, self.group_n)
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        _block_scaled_mm[grid](
            a,
            b,
            a_scales,
            b_scales,
            out,
            M,
            N,
            K,
            K // self.group_k,
            BM=bm,
            BN=bn,
            BK=self.group_k,
            GROUP_N=self.group_n,
            GROUP_M=8,
            num_warps=8 if bm == 128 else 4,
            num_stages=3,
        )
        return out
