"""Per-head RMS normalisation (QK-norm) of the q and k parts of a packed QKV activation.

hidden_states columns: [0, Hq*d) are q, the next Hkv*d are k, the last Hkv*d are v.
For every d-long head vector h of q (weight w = q_weight) and of k (w = k_weight):

    n = f16( fp32(h) * rsqrt(mean(fp32(h)^2) + eps) )    # first rounding
    y = f16( fp32(w) * fp32(n) )                          # second rounding

v is copied unchanged. out = concat(q normalised, k normalised, v) along the last dim, in the
input dtype (fp16 in every shape).
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, *, head_num: int, kv_head_num: int, size_per_head: int = 128, eps: float = 1e-6):
        super().__init__()
        self.head_num = head_num
        self.kv_head_num = kv_head_num
        self.size_per_head = size_per_head
        self.eps = eps

    def _normalise_heads(self, part: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        heads = part.unflatten(-1, (-1, self.size_per_head)).float()
        normed = (heads * torch.rsqrt(heads.square().mean(dim=-1, keepdim=True) + self.eps)).to(part.dtype)
        return (weight.float() * normed.float()).to(part.dtype).flatten(-2)

    def forward(self, hidden_states: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor) -> torch.Tensor:
        q_cols = self.head_num * self.size_per_head
        kv_cols = self.kv_head_num * self.size_per_head
        q, k, v = hidden_states.split([q_cols, kv_cols, kv_cols], dim=-1)
        return torch.cat([self._normalise_heads(q, q_weight), self._normalise_heads(k, k_weight), v], dim=-1)
