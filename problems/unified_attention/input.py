"""Inputs for unified_attention (N = sum(seq_lens); MB = ceil(max seq_len / bs) + 2; NB = MB * S + 64).

Draw order: q (N, Hq, D), k_cache, v_cache (NB, bs, Hkv, D), all bf16 N(0, 1); then a random
permutation of the NB blocks that fills the block table: row i holds ceil(len_i / bs) blocks
taken from the permutation in order, the rest of the row is 0 (never read).
cu_seqlens_q = [0, prefix sums of seq_lens] and seqused_k = seq_lens (KV length = query length),
both int32.

The source's block table was sequential (row i: i * MB + j); a shuffled one makes the
indirection real. Every referenced block is distinct and in range; unreferenced blocks hold
random data like the rest.
"""

import itertools
import math

import torch


def make_inputs(
    *,
    seed: int,
    device="cpu",
    num_seqs: int,
    seq_lens: list[int],
    num_query_heads: int,
    num_kv_heads: int,
    head_size: int,
    block_size: int,
) -> dict[str, torch.Tensor]:
    if len(seq_lens) != num_seqs:
        raise ValueError(f"num_seqs = {num_seqs} but {len(seq_lens)} seq_lens were given")
    gen = torch.Generator(device=device).manual_seed(seed)
    max_blocks = math.ceil(max(seq_lens) / block_size) + 2
    num_blocks = max_blocks * num_seqs + 64

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=torch.bfloat16, device=device)

    q = draw(sum(seq_lens), num_query_heads, head_size)
    k_cache = draw(num_blocks, block_size, num_kv_heads, head_size)
    v_cache = draw(num_blocks, block_size, num_kv_heads, head_size)

    permutation = torch.randperm(num_blocks, generator=gen, device=device).to(torch.int32)
    used = torch.tensor([math.ceil(n / block_size) for n in seq_lens], device=device)
    filled = torch.arange(max_blocks, device=device)[None, :] < used[:, None]  # row-major = permutation order
    block_table = torch.zeros(num_seqs, max_blocks, dtype=torch.int32, device=device)
    block_table[filled] = permutation[: int(used.sum())]

    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    cu_seqlens_q = torch.tensor([0, *itertools.accumulate(seq_lens)], dtype=torch.int32, device=device)
    return {
        "q": q,
        "k_cache": k_cache,
        "v_cache": v_cache,
        "cu_seqlens_q": cu_seqlens_q,
        "seqused_k": lens,
        "block_table": block_table,
    }
