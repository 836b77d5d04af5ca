"""Row sums of 32-bit words into int64, in one read of the words (sandbox.graph_burst's fingerprints).

    out[r] += Σ_j rows[r, j]    (rows int32, out int64: exact, so any grouping gives the same sum)

Each program sums one block of a row in int64 and adds it to `out[r]` atomically; integer addition
is associative, so the order the blocks land in changes nothing and the worker's graph and the
judge's check get the same numbers. torch's `sum(dtype=int64)` over int32 rows reads the words at
a fraction of the memory bandwidth on the H200; this kernel streams them once, which keeps the
fingerprints, and so what the judge takes off a graph replay and the slack it allows for that, a
small share of a small kernel's time.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 8192  # words per program
NUM_WARPS = 8
MAX_ROWS = 65535  # the grid's second axis


@triton.jit
def _row_sums(rows_ptr, out_ptr, width, BLOCK: tl.constexpr):
    block = tl.program_id(0).to(tl.int64)  # axis 0 takes up to 2^31 - 1 programs: any output's blocks
    row = tl.program_id(1).to(tl.int64)  # axis 1 at most 65,535: rows are outputs of one chunk (K ≤ 1,024)
    offsets = block * BLOCK + tl.arange(0, BLOCK)
    words = tl.load(rows_ptr + row * width + offsets, mask=offsets < width, other=0)
    tl.atomic_add(out_ptr + row, tl.sum(words.to(tl.int64), axis=0))


def add_row_word_sums(rows: torch.Tensor, out: torch.Tensor) -> None:
    """`out[r] += Σ rows[r, :]` for a contiguous 2-D int32 `rows` and a contiguous 1-D int64 `out`
    of one length on one CUDA device (CPU tensors under TRITON_INTERPRET=1): one launch,
    capturable in a CUDA graph. Adding, not assigning, lets a caller with many rows to sum zero
    all their sums in one memset rather than one per launch."""
    if rows.dim() != 2 or rows.dtype != torch.int32 or not rows.is_contiguous():
        raise ValueError("add_row_word_sums takes a contiguous 2-D int32 tensor of words")
    if out.dim() != 1 or out.dtype != torch.int64 or not out.is_contiguous() or out.shape[0] != rows.shape[0]:
        raise ValueError("add_row_word_sums adds into a contiguous 1-D int64 tensor with one sum per row")
    if rows.device != out.device:
        raise ValueError("add_row_word_sums: the words and the sums must be on one device")
    if rows.device.type != "cuda" and isinstance(_row_sums, triton.runtime.JITFunction):
        raise ValueError("add_row_word_sums runs on CUDA tensors (CPU ones under TRITON_INTERPRET=1)")
    height, width = rows.shape
    if height == 0 or width == 0:
        return
    if height > MAX_ROWS:
        raise ValueError(f"add_row_word_sums sums at most {MAX_ROWS} rows in one launch")
    _row_sums[(triton.cdiv(width, BLOCK), height)](rows, out, width, BLOCK=BLOCK, num_warps=NUM_WARPS)
