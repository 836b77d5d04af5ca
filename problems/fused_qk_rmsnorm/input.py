"""Inputs for fused_qk_rmsnorm: hidden_states (T, (Hq + 2*Hkv)*d) ~ N(0,1); q_weight (d,) and
k_weight (d,) ~ N(0,1) (not near one). dtype 'fp16' selects float16, anything else bfloat16.
Draw order: hidden_states, q_weight, k_weight."""

import torch


def make_inputs(
    *,
    seed: int,
    device: str | torch.device = "cpu",
    num_tokens: int,
    head_num: int,
    kv_head_num: int,
    size_per_head: int,
    dtype: str,
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    tdtype = torch.float16 if dtype == "fp16" else torch.bfloat16
    width = (head_num + 2 * kv_head_num) * size_per_head
    hidden_states = torch.randn(num_tokens, width, dtype=tdtype, device=device, generator=gen)
    q_weight = torch.randn(size_per_head, dtype=tdtype, device=device, generator=gen)
    k_weight = torch.randn(size_per_head, dtype=tdtype, device=device, generator=gen)
    return {"hidden_states": hidden_states, "q_weight": q_weight, "k_weight": k_weight}
