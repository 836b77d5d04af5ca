"""Inputs for mrope.

Draw order: q (T, Hq * hs) bf16 N(0, 1); k (T, Hkv * hs) bf16 N(0, 1); phi (3, T, R/2) fp32
uniform in [-pi, pi); cos = cos(phi), sin = sin(phi).

The source drew q and k as 0.02 * N(0, 1) and phi as 0.1 * N(0, 1): rotations by ~0.1 rad of
values ~0.02 change them by ~0.002, under the 1e-2 absolute tolerance, so a kernel returning
its input (or using the wrong section's table) passed. Unit-scale q, k and full-circle angles
make every slot's rotation visible.
"""

import math

import torch


def make_inputs(
    *,
    seed: int,
    device="cpu",
    token_count: int,
    num_query_heads: int,
    num_kv_heads: int,
    head_size: int,
    rotary_dim: int,
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(token_count, num_query_heads * head_size, generator=gen, dtype=torch.bfloat16, device=device)
    k = torch.randn(token_count, num_kv_heads * head_size, generator=gen, dtype=torch.bfloat16, device=device)
    u = torch.rand(3, token_count, rotary_dim // 2, generator=gen, dtype=torch.float32, device=device)
    phi = (u * 2 - 1) * math.pi
    return {"q": q, "k": k, "cos": phi.cos(), "sin": phi.sin()}
