"""chunk_delta_rule_output: the output stage of chunked gated linear attention (gated
delta-net "chunk output"). Each token reads the state at the start of its chunk (decayed by its
gate) plus a causal intra-chunk attention over earlier tokens of the chunk, all times a scale.

Per batch b, value head j (q/k head min(j // r, Hq-1), r = max(Hv // Hq, 1)) and chunk c of
C rows (q, k, v, g zero-padded along time to a multiple of C), in fp32:
  inter[i]  = (Q_c H_c)[i] * exp(G_c[i])                    H_c = h[b, c, j]  (K x V)
  A[i, l]   = (Q_c K_c^T)[i, l] * m[i, l] for l <= i, else 0, with
              m[i, l] = exp(G_c[i] - G_c[l]) if G_c[i] - G_c[l] <= 0 else 0  (literal sign test)
  A         = fp32(bf16(A))
  out[b, t, j] = bf16( (inter + A V_c) * scale )            scale = K^-0.5 unless given
The generator's gates are i.i.d. per position rather than cumulative sums, so the sign test
zeroes about half of the causal pairs; that is the operator's defined behaviour here.
"""

import torch
from torch import nn
from torch.nn import functional as F


class Model(nn.Module):
    def __init__(self, *, chunk_size: int = 64, scale: float | None = None):
        super().__init__()
        self.chunk_size = int(chunk_size)
        self.scale = scale

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, h: torch.Tensor, g: torch.Tensor
    ) -> torch.Tensor:
        """q, k (B, T, Hq, K) bf16; v (B, T, Hv, V) bf16; h (B, NC, Hv, K, V) bf16; g (B, T, Hv) fp32
        -> out (B, T, Hv, V) bf16."""
        batch, tokens, q_heads, key_dim = q.shape
        v_heads, value_dim = v.shape[2], v.shape[3]
        size = self.chunk_size
        chunks = -(-tokens // size)
        pad = chunks * size - tokens
        scale = key_dim**-0.5 if self.scale is None else float(self.scale)

        ratio = max(v_heads // q_heads, 1)
        head_map = torch.clamp(torch.arange(v_heads, device=q.device) // ratio, max=q_heads - 1)

        def chunked(x: torch.Tensor) -> torch.Tensor:
            """(B, T, H, ...) -> fp32 (B, NC, H, C, ...), zero-padded along time."""
            x = F.pad(x.float(), (0, 0) * (x.dim() - 2) + (0, pad))
            x = x.view(batch, chunks, size, *x.shape[2:])
            return x.transpose(2, 3)

        qc = chunked(q[:, :, head_map])  # (B, NC, Hv, C, K)
        kc = chunked(k[:, :, head_map])  # (B, NC, Hv, C, K)
        vc = chunked(v)  # (B, NC, Hv, C, V)
        gc = chunked(g)  # (B, NC, Hv, C)

        inter = torch.matmul(qc, h.float()) * torch.exp(gc).unsqueeze(-1)
        gate_diff = gc.unsqueeze(-1) - gc.unsqueeze(-2)  # [i, l] = G[i] - G[l]
        gate_factor = torch.where(gate_diff <= 0, torch.exp(gate_diff), torch.zeros_like(gate_diff))
        scores = torch.matmul(qc, kc.transpose(-1, -2)) * gate_factor
        causal = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, 0.0)
        scores = scores.to(torch.bfloat16).float()

        out = (inter + torch.matmul(scores, vc)) * scale  # (B, NC, Hv, C, V)
        out = out.transpose(2, 3).reshape(batch, chunks * size, v_heads, value_dim)[:, :tokens]
        return out.to(torch.bfloat16)
