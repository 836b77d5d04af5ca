"""Inputs for paged_attention_decode (x = 16 / element size; MB = ceil(ctx / bs); NB = MB * S + 16).

Draw order: query (S, Hq, D), k_cache (NB, Hkv, D/x, bs, x), v_cache (NB, Hkv, D, bs), all N(0, 1)
in the shape's dtype; then block_tables (S, MB) int32 = the first S * MB entries of a random
permutation of the NB blocks. seq_lens (S,) int32 = ctx_len for every sequence.

The source's block table was sequential (entry [i, j] = i * MB + j); a shuffled one makes the
indirection real. Every referenced block is distinct and in range, and the 16 spare blocks,
holding random data like the rest, are scattered among them.
"""

import math

import torch

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def make_inputs(
    *,
    seed: int,
    device="cpu",
    num_seqs: int,
    ctx_len: int,
    num_query_heads: int,
    num_kv_heads: int,
    head_size: int,
    block_size: int,
    dtype: str,
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    torch_dtype = _DTYPES[dtype]
    x = 16 // torch_dtype.itemsize
    max_blocks = math.ceil(ctx_len / block_size)
    num_blocks = max_blocks * num_seqs + 16

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=torch_dtype, device=device)

    query = draw(num_seqs, num_query_heads, head_size)
    k_cache = draw(num_blocks, num_kv_heads, head_size // x, block_size, x)
    v_cache = draw(num_blocks, num_kv_heads, head_size, block_size)
    permutation = torch.randperm(num_blocks, generator=gen, device=device)
    block_tables = permutation[: num_seqs * max_blocks].view(num_seqs, max_blocks).to(torch.int32)
    seq_lens = torch.full((num_seqs,), ctx_len, dtype=torch.int32, device=device)
    return {"query": query, "k_cache": k_cache, "v_cache": v_cache, "block_tables": block_tables, "seq_lens": seq_lens}
