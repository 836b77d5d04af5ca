"""attention_forward: packed variable-length bidirectional multi-head self-attention without a
KV cache (vision-encoder prefill). Sequence i owns query rows [cu_seqlens_q[i], cu_seqlens_q[i+1])
and key rows [cu_seqlens_k[i], cu_seqlens_k[i+1]) and attends only to itself, with no mask:

    out[a:b, h] = bf16( softmax(Q_h K_h^T / sqrt(D)) V_h )     Q, K, V upcast to fp32

Queries are processed in row chunks so the fp32 score block stays under SCORE_BLOCK_ELEMENTS
(a 65 556-token sequence would otherwise need a ~275 GB score matrix); each row's softmax still
sees all of its keys, so chunking does not change the result.
"""

import math

import torch
from torch import nn

SCORE_BLOCK_ELEMENTS = 1 << 28  # 1 GiB of fp32 scores


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q (Lq, H, D), k, v (Lk, H, D), fp32 -> (Lq, H, D) fp32, unmasked softmax attention per head."""
    heads, keys, head_dim = q.shape[1], k.shape[0], q.shape[2]
    q_h, k_h, v_h = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # (H, L, D)
    out = torch.empty_like(q_h)
    rows = max(1, SCORE_BLOCK_ELEMENTS // (heads * keys))
    for r0 in range(0, q.shape[0], rows):
        scores = q_h[:, r0 : r0 + rows] @ k_h.transpose(1, 2) / math.sqrt(head_dim)
        out[:, r0 : r0 + rows] = torch.softmax(scores, dim=-1) @ v_h
    return out.transpose(0, 1)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        cu_seqlens_k: torch.Tensor,
    ) -> torch.Tensor:
        """q, k, v (T, H, D) bf16; cu_seqlens_q, cu_seqlens_k (n+1,) int32 -> out (T, H, D) bf16."""
        out = torch.zeros_like(q)
        bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        for i in range(len(bounds_q) - 1):
            a, b = bounds_q[i], bounds_q[i + 1]
            c, d = bounds_k[i], bounds_k[i + 1]
            if b <= a:
                continue
            out[a:b] = _attention(q[a:b].float(), k[c:d].float(), v[c:d].float()).to(q.dtype)
        return out
