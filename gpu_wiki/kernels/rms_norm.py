"""
+++
title = "RMS norm: several rows per program, fp32 statistics, one rounding"
operator = "rms_norm"
op_family = ["norm"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["rmsnorm", "row reduction", "rows per program", "memory-bound", "bf16"]
sources = [
  "Zhang & Sennrich, Root Mean Square Layer Normalization, NeurIPS 2019 — https://arxiv.org/abs/1910.07467",
  "Triton tutorial: Layer Normalization — https://triton-lang.org/main/getting-started/tutorials/05-layer-norm.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 56/56 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31", "32", "33", "34", "35", "36", "37", "38", "39", "40", "41", "42", "43", "44", "45", "46", "47", "48", "49", "50", "51", "52", "53", "54", "55"]
shapes_scored = 56
shapes_correct = 56
operator_score = 0.358
median_time_ms = 0.00744
median_dsl_share = 1
time_ms = { "0" = 0.00605, "1" = 0.00864, "2" = 0.0123, "3" = 0.0177, "4" = 0.0226, "5" = 0.00438, "6" = 0.00461, "7" = 0.00512, "8" = 0.00595, "9" = 0.00829, "10" = 0.0122, "11" = 0.0189, "12" = 0.0286, "13" = 0.119, "14" = 0.0966, "15" = 0.00355, "16" = 0.00403, "17" = 0.00403, "18" = 0.0043, "19" = 0.00461, "20" = 0.00544, "21" = 0.00646, "22" = 0.00893, "23" = 0.0107, "24" = 0.0139, "25" = 0.0177, "26" = 0.134, "27" = 0.168, "28" = 0.00387, "29" = 0.0311, "30" = 0.00611, "31" = 0.0106, "32" = 0.00419, "33" = 0.00438, "34" = 0.0048, "35" = 0.00566, "36" = 0.00736, "37" = 0.0111, "38" = 0.018, "39" = 0.0328, "40" = 0.228, "41" = 0.00355, "42" = 0.00826, "43" = 0.00486, "44" = 0.00544, "45" = 0.00699, "46" = 0.00384, "47" = 0.00419, "48" = 0.00438, "49" = 0.00509, "50" = 0.00867, "51" = 0.0101, "52" = 0.0146, "53" = 0.159, "54" = 0.00528, "55" = 0.00752 }
failures = {}
+++
out = bf16(x * rsqrt(mean(x^2) + eps) * weight), statistics in fp32.

Memory-bound (≈1 FLOP/B): the only goal is streaming x once and writing out once. A program
owns ROWS rows × BLOCK_H columns (the whole row; H ≤ 8192 here), so small hidden sizes
(128…1024) still give each program 16–32 KB to move, and the weight vector is loaded once
per program instead of once per row. ROWS is picked on the host so that a program holds
about 4096 elements: 1 row for H ≥ 4096, 32 rows for H = 128. The row index is widened to
int64 before multiplying by the stride (T·H can exceed 2^31 for long prefills).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_rows(
    x_ptr, w_ptr, out_ptr, n_rows, H, stride_x, stride_out, eps, ROWS: tl.constexpr, BLOCK_H: tl.constexpr
):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_H)
    row_ok = rows < n_rows
    col_ok = cols < H
    mask = row_ok[:, None] & col_ok[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / H + eps)
    y = x * inv_rms[:, None] * w[None, :]
    tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


def _launch_shape(H: int) -> tuple[int, int, int]:
    """(BLOCK_H, ROWS, num_warps) for a row of H elements: ~4096 elements per program."""
    block_h = triton.next_power_of_2(H)
    rows = max(1, 4096 // block_h)
    num_warps = 4 if block_h * rows <= 4096 else 8
    return block_h, rows, num_warps


class Model(torch.nn.Module):
    def __init__(self, *, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        H = x.shape[-1]
        x2 = x.reshape(-1, H)
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        out = torch.empty((x2.shape[0], H), dtype=x.dtype, device=x.device)
        block_h, rows, num_warps = _launch_shape(H)
        grid = (triton.cdiv(x2.shape[0], rows),)
        _rms_norm_rows[grid](
            x2,
            weight,
            out,
            x2.shape[0],
            H,
            x2.stride(0),
            out.stride(0),
            self.eps,
            ROWS=rows,
            BLOCK_H=block_h,
            num_warps=num_warps,
        )
        return out.view(x.shape)
