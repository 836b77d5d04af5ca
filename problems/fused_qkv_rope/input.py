"""Inputs for fused_qkv_rope.

Draw order: qkv (T, (Hq + 2 Hkv) Dh) N(0, 1) in the shape's dtype (bf16 or fp16); qkv_bias
((Hq + 2 Hkv) Dh,) 0.01 * N(0, 1) only when with_bias; positions (T,) int32 uniform in
[1, max_position).

The source used positions 0 .. T-1 with T = 1 on every shape, so the only position was 0 and
the rotation was the identity (a kernel returning its input passed). Random non-zero positions
make every shape rotate; position 0 is excluded so that no seed degenerates.
"""

import torch

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def make_inputs(
    *,
    seed: int,
    device="cpu",
    total_tokens: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: str,
    with_bias: bool = False,
    max_position: int = 4096,
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    width = (num_heads + 2 * num_kv_heads) * head_dim
    torch_dtype = _DTYPES[dtype]
    inputs = {"qkv": torch.randn(total_tokens, width, generator=gen, dtype=torch_dtype, device=device)}
    if with_bias:
        inputs["qkv_bias"] = torch.randn(width, generator=gen, dtype=torch_dtype, device=device) * 0.01
    inputs["positions"] = torch.randint(
        1, max_position, (total_tokens,), generator=gen, dtype=torch.int32, device=device
    )
    return inputs
