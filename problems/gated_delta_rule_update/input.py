"""Inputs for gated_delta_rule_update. Draw order: A_log, a, dt_bias, q, k, v, b, initial_state
(k and b are unscaled N(0, 1), everything else 0.02 * N(0, 1)), then the state slots.

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
    num_q_heads: int,
    num_v_heads: int,
    key_dim: int,
    value_dim: int,
    state_count: int,
) -> dict[str, torch.Tensor]:
    if batch_size > state_count:
        raise ValueError(f"batch_size {batch_size} needs at least as many state slots, got {state_count}")
    gen = torch.Generator(device=device).manual_seed(seed)

    def normal(*shape: int, dtype=torch.bfloat16) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=dtype, device=device)

    B, T = batch_size, token_count
    A_log = normal(num_v_heads, dtype=torch.float32) * 0.02
    a = normal(B, T, num_v_heads) * 0.02
    dt_bias = normal(num_v_heads) * 0.02
    q = normal(B, T, num_q_heads, key_dim) * 0.02
    k = normal(B, T, num_q_heads, key_dim)
    v = normal(B, T, num_v_heads, value_dim) * 0.02
    b = normal(B, T, num_v_heads)
    initial_state = normal(state_count, num_v_heads, key_dim, value_dim, dtype=torch.float32) * 0.02
    slots = torch.randperm(state_count, generator=gen, device=device)[:B].to(torch.int32)
    return {
        "A_log": A_log,
        "a": a,
        "dt_bias": dt_bias,
        "q": q,
        "k": k,
        "v": v,
        "b": b,
        "initial_state": initial_state,
        "initial_state_indices": slots,
    }
