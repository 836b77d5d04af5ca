"""Inputs for {name}: x (tokens, hidden) bf16 ~ N(0, 1).

make_inputs must be deterministic for a seed: draw only from a local generator, never the
global RNG. Its keyword arguments are a shape's "inputs" in shapes.json; the keys of the dict
it returns are forward's parameter names.
"""

import torch


def make_inputs(*, seed: int, device: str | torch.device = "cpu", tokens: int, hidden: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(tokens, hidden, dtype=torch.bfloat16, device=device, generator=gen)
    return {"x": x}
