"""Inputs for chunk_gated_delta_rule_state. Draw order: k, w, u, g, initial_state, then the
state slots. k, w, u are 0.02 * N(0, 1) bf16, g is -U[0, 1) fp32 (i.i.d. log-gates in (-1, 0]),
initial_state is a 0.02 * N(0, 1) fp32 pool of state_count slots.

The slots are B distinct slots in random order (a random permutation of the pool, first B
entries) rather than the source's [0, 1, ..., B-1]: an implementation that ignores the indices
must fail. Distinct slots keep the final-state write well defined, so B <= state_count.
"""

import torch


def make_inputs(
    *,
    seed: int,
    device="cpu",
    batch_size: int,
    token_count: int,
    num_k_heads: int,
    num_v_heads: int,
    key_dim: int,
    value_dim: int,
    state_count: int,
) -> dict[str, torch.Tensor]:
    if batch_size > state_count:
        raise ValueError(f"batch_size {batch_size} needs at least as many state slots, got {state_count}")
    gen = torch.Generator(device=device).manual_seed(seed)

    def normal(*shape: int, dtype=torch.bfloat16) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=dtype, device=device) * 0.02

    B, T = batch_size, token_count
    k = normal(B, T, num_k_heads, key_dim)
    w = normal(B, T, num_v_heads, key_dim)
    u = normal(B, T, num_v_heads, value_dim)
    g = -torch.rand((B, T, num_v_heads), generator=gen, dtype=torch.float32, device=device)
    initial_state = normal(state_count, num_v_heads, key_dim, value_dim, dtype=torch.float32)
    slots = torch.randperm(state_count, generator=gen, device=device)[:B].to(torch.int32)
    return {"k": k, "w": w, "u": u, "g": g, "initial_state": initial_state, "initial_state_indices": slots}
