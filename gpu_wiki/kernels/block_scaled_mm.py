"""
+++
title = "fp8 block-scaled GEMM (1x128 activation, 128x128 weight scales) with per-K-block promotion to fp32"
operator = "block_scaled_mm"
op_family = ["gemm", "quant"]
dsl = ["triton"]
hardware = ["hopper"]
tags = ["fp8", "e4m3fn", "gemm", "block scaling", "deepseek", "tl.dot", "wgmma", "k-major", "fp32 output", "grouped ordering", "compute-bound"]
sources = [
  "DeepSeek-V3 Technical Report, §3.3 fine-grained quantisation and increased accumulation precision — https://arxiv.org/abs/2412.19437",
  "Triton tutorial: Matrix Multiplication — https://triton-lang.org/main/getting-started/tutorials/03-matrix-multiplication.html",
  "PTX ISA: wgmma with e4m3 operands (K-major) — https://docs.nvidia.com/cuda/parallel-thread-execution/",
]
validated_shapes = ["smoke (CPU interpreter, CI)"]

[h200]
status = "pending H200 run"
+++
out[m, n] = Σ_j (P_j[m, n] · a_scales[m, j]) · b_scales[n // 128, j], with P_j the fp32 product of
the fp8 codes over K-block j (128 wide); out is fp32, b is stored (N, K).

Each program computes a BM × BN tile. The K loop steps exactly one scale block (BK = 128 =
group_k): `tl.dot` of the two fp8 tiles gives P_j in fp32 on the tensor cores (fp8 × fp8
products are exact in fp32), which is then scaled — first by the per-row activation scale,
then by the tile's single weight scale (BN divides 128, so a tile never straddles two weight
scale rows) — and added to an fp32 accumulator. Scaling per K block is required for
correctness (scales differ between blocks) and is also the "promotion" that protects
Hopper's reduced-precision fp8 accumulation. Both operands are K-major ([BM, 128] of a and
[BN, 128] of b), the layout fp8 wgmma needs. Grouped program order keeps a band of `a` and
`b` tiles hot in L2. Row and output offsets are int64 (M·N reaches 2.9e9).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _block_scaled_mm(a_ptr, b_ptr, as_ptr, bs_ptr, c_ptr, M, N, K, n_kb,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_N: tl.constexpr, GROUP_M: tl.constexpr):
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
        a = tl.load(a_ptrs, mask=m_ok[:, None], other=0.0)
        b = tl.load(b_ptrs, mask=n_ok[:, None], other=0.0)
        partial = tl.dot(a, tl.trans(b))
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
        _block_scaled_mm[grid](a, b, a_scales, b_scales, out, M, N, K, K // self.group_k,
                               BM=bm, BN=bn, BK=self.group_k, GROUP_N=self.group_n, GROUP_M=8,
                               num_warps=8 if bm == 128 else 4, num_stages=3)
        return out
