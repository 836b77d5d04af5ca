"""paged_attention_decode: one query token per sequence attends over that sequence's context in
a paged KV cache with the split-key layout (the key head dim is cut into chunks of x = 16 bytes).

For sequence i and context position p < seq_lens[i]: block = block_tables[i, p // bs], o = p % bs,
    K[p, h, d] = k_cache[block, h, d // x, o, d % x]      k_cache (NB, Hkv, D/x, bs, x)
    V[p, h, d] = v_cache[block, h, d, o]                  v_cache (NB, Hkv, D, bs)
Query head hq reads kv head hq // (Hq / Hkv). In fp32:
    out[i, hq] = softmax(q K^T / sqrt(D)) V, cast to the query dtype; a sequence with length <= 0
    gives zeros.
"""

import math

import torch
from torch import nn


def _gather_context(k_cache: torch.Tensor, v_cache: torch.Tensor, blocks: torch.Tensor, length: int):
    """The first `length` context positions of one sequence as K, V (length, Hkv, D)."""
    k = k_cache[blocks]  # (nb, Hkv, D/x, bs, x)
    nb, kv_heads, chunks, block_size, x = k.shape
    k = k.permute(0, 3, 1, 2, 4).reshape(nb * block_size, kv_heads, chunks * x)
    v = v_cache[blocks].permute(0, 3, 1, 2).reshape(nb * block_size, kv_heads, chunks * x)
    return k[:length], v[:length]


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(
        self,
        query: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
    ) -> torch.Tensor:
        """query (S, Hq, D); k_cache (NB, Hkv, D/x, bs, x); v_cache (NB, Hkv, D, bs); block_tables
        (S, MB) int32; seq_lens (S,) int32 -> out (S, Hq, D) in the query dtype."""
        num_heads, head_dim = query.shape[1], query.shape[2]
        group = num_heads // k_cache.shape[1]
        block_size = k_cache.shape[3]
        out = torch.zeros_like(query)
        for i, length in enumerate(seq_lens.tolist()):
            if length <= 0:
                continue
            blocks = block_tables[i, : math.ceil(length / block_size)]
            k, v = _gather_context(k_cache, v_cache, blocks, length)
            k = k.float().repeat_interleave(group, dim=1).transpose(0, 1)  # (Hq, L, D)
            v = v.float().repeat_interleave(group, dim=1).transpose(0, 1)
            q = query[i].float().unsqueeze(1)  # (Hq, 1, D)
            probs = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(head_dim), dim=-1)
            out[i] = (probs @ v).squeeze(1).to(query.dtype)
        return out
