"""unified_attention: variable-length attention of packed query tokens against a paged KV cache
(blocks x slots x kv heads x head dim) with grouped-query heads.

Sequence i owns query rows [a, b) = cu_seqlens_q[i : i+2] (skipped when empty) and kv_len =
seqused_k[i] cached positions; position p lives in block block_table[i, p // bs], slot p % bs.
Query head hq reads kv head hq // (Hq / Hkv). In fp32 with scale D^-0.5:
    if b - a == kv_len: causal — query j (0-based in the sequence) attends keys 0..j
    otherwise:          no mask at all
    out[a:b] = bf16(softmax(scale * Q K^T) V)
Queries are processed in row chunks so the fp32 score block stays under SCORE_BLOCK_ELEMENTS
(a 49 152-token sequence would otherwise need a ~39 GB score matrix); each row's softmax still
sees all of its keys, so chunking does not change the result.
"""

import math

import torch
from torch import nn

SCORE_BLOCK_ELEMENTS = 1 << 28  # 1 GiB of fp32 scores


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """q (Lq, H, D), k, v (Lk, H, D), fp32 -> (Lq, H, D) fp32. Causal means query j sees keys <= j."""
    heads, head_dim = q.shape[1], q.shape[2]
    q_h, k_h, v_h = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # (H, L, D)
    out = torch.empty_like(q_h)
    rows = max(1, SCORE_BLOCK_ELEMENTS // (heads * k.shape[0]))
    for r0 in range(0, q.shape[0], rows):
        r1 = min(r0 + rows, q.shape[0])
        keys = r1 if causal else k.shape[0]  # keys past the chunk's last query are all masked
        scores = (q_h[:, r0:r1] @ k_h[:, :keys].transpose(1, 2)) * head_dim**-0.5
        if causal:
            query_pos = torch.arange(r0, r1, device=q.device)[:, None]
            key_pos = torch.arange(keys, device=q.device)[None, :]
            scores = scores.masked_fill(key_pos > query_pos, float("-inf"))
        out[:, r0:r1] = torch.softmax(scores, dim=-1) @ v_h[:, :keys]
    return out.transpose(0, 1)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        seqused_k: torch.Tensor,
        block_table: torch.Tensor,
    ) -> torch.Tensor:
        """q (N, Hq, D) bf16; k_cache, v_cache (NB, bs, Hkv, D) bf16; cu_seqlens_q (S+1,), seqused_k (S,),
        block_table (S, MB) int32 -> out (N, Hq, D) bf16."""
        block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
        group = q.shape[1] // kv_heads
        out = torch.zeros_like(q)
        bounds, kv_lens = cu_seqlens_q.tolist(), seqused_k.tolist()
        for i, kv_len in enumerate(kv_lens):
            a, b = bounds[i], bounds[i + 1]
            if b <= a:
                continue
            blocks = block_table[i, : math.ceil(kv_len / block_size)]
            k = k_cache[blocks].flatten(0, 1)[:kv_len].float().repeat_interleave(group, dim=1)
            v = v_cache[blocks].flatten(0, 1)[:kv_len].float().repeat_interleave(group, dim=1)
            out[a:b] = _attention(q[a:b].float(), k, v, causal=(b - a == kv_len)).to(q.dtype)
        return out
