"""Inputs for layer_norm: x of the given shape (last dim H), weight (H,), bias (H,); all bf16
~ N(0,1). Draw order: x, weight, bias."""

import torch


def make_inputs(*, seed: int, device: str | torch.device = "cpu", shape: list[int]) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    hidden = shape[-1]
    x = torch.randn(*shape, dtype=torch.bfloat16, device=device, generator=gen)
    weight = torch.randn(hidden, dtype=torch.bfloat16, device=device, generator=gen)
    bias = torch.randn(hidden, dtype=torch.bfloat16, device=device, generator=gen)
    return {"x": x, "weight": weight, "bias": bias}
