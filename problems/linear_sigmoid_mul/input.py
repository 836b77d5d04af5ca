"""Inputs for linear_sigmoid_mul, drawn as bf16 in this order: hidden_states (T, H) N(0, 1),
weight (O, H) N(0, 1) * H^-0.5, bias (O,) N(0, 1), post_mul_mat (T, O) N(0, 1).

The source scaled hidden_states, bias and post_mul_mat by 0.02, which left the gate near 0
(sigmoid ~ 0.5) and outputs near 0.01: a kernel returning 0.5 * post_mul_mat, or ignoring the
bias, passed the tolerance. Unit scale puts the sigmoid in its non-linear range.
"""

import torch


def make_inputs(
    *, seed: int, device="cpu", token_count: int, hidden_size: int, out_features: int
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=torch.bfloat16, device=device)

    hidden_states = draw(token_count, hidden_size)
    weight = draw(out_features, hidden_size) * hidden_size**-0.5
    bias = draw(out_features)
    post_mul_mat = draw(token_count, out_features)
    return {"hidden_states": hidden_states, "weight": weight, "bias": bias, "post_mul_mat": post_mul_mat}
