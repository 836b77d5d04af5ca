"""block_scaled_mm: fp8 (e4m3fn) GEMM with block-wise dequantisation, out = A B^T in fp32.

a (M, K) carries one fp32 scale per row and per gk-wide slice of K; b (N, K) one fp32 scale per
gn x gk tile. With nkb = K / gk blocks along K:
    P_j[m, n]  = sum_{c in block j} fp32(a[m, c]) * fp32(b[n, c])            fp32 accumulation
    out[m, n]  = sum_j ( P_j[m, n] * a_scales[m, j] ) * b_scales[n // gn, j]  fp32, j ascending
e4m3 values have 4 significant bits, so every product is exact in fp32 (and in TF32): only the
accumulation rounds. M is processed in slices of ROW_SLICE rows to bound the fp32 partials.
"""

import torch
from torch import nn

ROW_SLICE = 16384


class Model(nn.Module):
    def __init__(self, *, group_n: int = 128, group_k: int = 128):
        super().__init__()
        self.group_n = group_n
        self.group_k = group_k

    def forward(self, a: torch.Tensor, b: torch.Tensor, a_scales: torch.Tensor, b_scales: torch.Tensor) -> torch.Tensor:
        """a (M, K), b (N, K) float8_e4m3fn; a_scales (M, K/gk), b_scales (N/gn, K/gk) fp32 -> out (M, N) fp32."""
        m, k = a.shape
        n, gk = b.shape[0], self.group_k
        b_wide = b.float()
        b_scale_per_column = b_scales.repeat_interleave(self.group_n, dim=0)  # (N, nkb)
        out = torch.empty(m, n, dtype=torch.float32, device=a.device)
        for m0 in range(0, m, ROW_SLICE):
            rows = slice(m0, m0 + ROW_SLICE)
            a_wide = a[rows].float()
            acc = torch.zeros(a_wide.shape[0], n, dtype=torch.float32, device=a.device)
            for j in range(k // gk):
                cols = slice(j * gk, (j + 1) * gk)
                partial = a_wide[:, cols] @ b_wide[:, cols].t()
                acc += (partial * a_scales[rows, j : j + 1]) * b_scale_per_column[:, j]
            out[rows] = acc
        return out
