"""reshape_and_cache: scatter new per-token keys and values into a paged KV cache laid out as
(blocks, block_size slots, kv heads, head dim), returning updated copies of both caches.

Outputs start as copies of the input caches. For every token n with s = slot_mapping[n] >= 0:
    key_cache[s // bs, s % bs] = key[n];  value_cache[s // bs, s % bs] = value[n]   (bitwise copies)
Tokens with a negative slot are skipped. The input caches are not modified.
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """key, value (N, Hkv, D); caches (NB, bs, Hkv, D); slot_mapping (N,) int64
        -> {"key_cache", "value_cache"} (NB, bs, Hkv, D)."""
        written = slot_mapping >= 0
        slots = slot_mapping[written]
        new_key_cache = key_cache.clone()
        new_value_cache = value_cache.clone()
        # A flat (NB * bs, Hkv, D) view of the copy: slot s is row s.
        new_key_cache.view(-1, *key_cache.shape[2:])[slots] = key[written]
        new_value_cache.view(-1, *value_cache.shape[2:])[slots] = value[written]
        return {"key_cache": new_key_cache, "value_cache": new_value_cache}
