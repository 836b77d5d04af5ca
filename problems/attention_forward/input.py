"""Inputs for attention_forward (T = sum(seq_lens)).

Draw order: q, k, v (T, H, D) bf16 N(0, 1). cu_seqlens_q = cu_seqlens_k = [0, L0, L0 + L1, ...]
int32 (two separate tensors with equal contents).
"""

import itertools

import torch


def make_inputs(
    *, seed: int, device="cpu", num_heads: int, head_dim: int, seq_lens: list[int]
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    tokens = sum(seq_lens)

    def draw() -> torch.Tensor:
        return torch.randn(tokens, num_heads, head_dim, generator=gen, dtype=torch.bfloat16, device=device)

    q, k, v = draw(), draw(), draw()
    bounds = [0, *itertools.accumulate(seq_lens)]
    return {
        "q": q,
        "k": k,
        "v": v,
        "cu_seqlens_q": torch.tensor(bounds, dtype=torch.int32, device=device),
        "cu_seqlens_k": torch.tensor(bounds, dtype=torch.int32, device=device),
    }
