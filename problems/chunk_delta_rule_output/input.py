"""Inputs for chunk_delta_rule_output. Draw order: q, k, v, h, g.
q, v, h are 0.02 * N(0, 1) bf16, k is unscaled N(0, 1) bf16, g is -U[0, 1) fp32 (i.i.d. log-gates
in (-1, 0]); h holds one (K x V) state per chunk of chunk_size tokens."""

import torch


def make_inputs(
    *,
    seed: int,
    device="cpu",
    batch_size: int,
    token_count: int,
    num_q_heads: int,
    num_v_heads: int,
    key_dim: int,
    value_dim: int,
    chunk_size: int,
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=torch.bfloat16, device=device)

    B, T = batch_size, token_count
    chunks = -(-T // chunk_size)
    q = normal(B, T, num_q_heads, key_dim) * 0.02
    k = normal(B, T, num_q_heads, key_dim)
    v = normal(B, T, num_v_heads, value_dim) * 0.02
    h = normal(B, chunks, num_v_heads, key_dim, value_dim) * 0.02
    g = -torch.rand((B, T, num_v_heads), generator=gen, dtype=torch.float32, device=device)
    return {"q": q, "k": k, "v": v, "h": h, "g": g}
