"""Inputs for causal_conv1d: x (Dm, T), weight (Dm, W), bias (Dm,), initial_state (1, Dm, W-1),
all bf16 drawn as 0.02 * N(0, 1), in that draw order."""

import torch


def make_inputs(*, seed: int, device="cpu", token_count: int, dim: int, width: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=torch.bfloat16, device=device) * 0.02

    x = draw(dim, token_count)
    weight = draw(dim, width)
    bias = draw(dim)
    initial_state = draw(1, dim, width - 1)
    return {"x": x, "weight": weight, "bias": bias, "initial_state": initial_state}
