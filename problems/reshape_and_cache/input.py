"""Inputs for reshape_and_cache (generator parameter shape = [N, Hkv, D]; NB = ceil(N / bs)).

Draw order: key, value (N, Hkv, D) bf16 N(0, 1); key_cache, value_cache (NB, bs, Hkv, D) bf16
N(0, 1); slot_mapping (N,) int64 = the first N entries of a random permutation of the
NB * bs slots.

The source used zero caches and the identity slot mapping; random cache contents make the
untouched slots count (a kernel must keep them), and a shuffled mapping makes the scatter real.
Every slot is still written at most once and lies in range.
"""

import math

import torch


def make_inputs(*, seed: int, device="cpu", shape: list[int], block_size: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    num_tokens, num_kv_heads, head_size = shape
    num_blocks = math.ceil(num_tokens / block_size)

    def draw(*dims: int) -> torch.Tensor:
        return torch.randn(dims, generator=gen, dtype=torch.bfloat16, device=device)

    key = draw(num_tokens, num_kv_heads, head_size)
    value = draw(num_tokens, num_kv_heads, head_size)
    key_cache = draw(num_blocks, block_size, num_kv_heads, head_size)
    value_cache = draw(num_blocks, block_size, num_kv_heads, head_size)
    slot_mapping = torch.randperm(num_blocks * block_size, generator=gen, device=device)[:num_tokens]
    return {
        "key": key,
        "value": value,
        "key_cache": key_cache,
        "value_cache": value_cache,
        "slot_mapping": slot_mapping.to(torch.int64),
    }
