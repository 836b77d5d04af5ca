"""mla_decode_attention: decode-time multi-head latent attention in the absorbed form. Every query
head attends over one latent cache shared by all heads; keys are the full (latent + rope) rows,
values are their first L (latent) columns.

Sequence i occupies cache rows [o_i, o_i + len_i), o_i = sum_{j<i} seq_lens[j]; C = those rows
(len_i, L + Rr). In fp32, for every head h:
    s = C q_h / sqrt(L + Rr);  p = softmax(s);  out[i, h] = bf16(p^T C[:, :L])
The scale uses the full L + Rr = 576 query width.
"""

import itertools
import math

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, *, nhead: int, kv_lora_rank: int = 512, qk_rope_head_dim: int = 64):
        super().__init__()
        self.nhead = nhead
        self.kv_lora_rank = kv_lora_rank
        self.qk_rope_head_dim = qk_rope_head_dim

    def forward(self, q: torch.Tensor, kv_cache: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
        """q (B, Hn, L + Rr) bf16; kv_cache (total, 1, L + Rr) bf16; seq_lens (B,) int32 -> out (B, Hn, L) bf16."""
        latent = self.kv_lora_rank
        width = latent + self.qk_rope_head_dim
        lens = seq_lens.tolist()
        out = torch.empty(q.shape[0], q.shape[1], latent, dtype=q.dtype, device=q.device)
        for i, (start, length) in enumerate(zip(itertools.accumulate(lens, initial=0), lens)):
            rows = kv_cache[start : start + length, 0].float()  # (len, L + Rr)
            scores = q[i].float() @ rows.t() / math.sqrt(width)  # (Hn, len)
            out[i] = (torch.softmax(scores, dim=-1) @ rows[:, :latent]).to(q.dtype)
        return out
