"""Inputs for fp8_blockscale_fused_moe: fp8 e4m3fn codes with fp32 block scales.

Draw order: hidden source 0.03 * N(0, 1) bf16 (T, D); w1 source N(0, 1) bf16 (E, 2I, D), drawn
expert by expert; w2 source N(0, 1) bf16 (E, D, I), expert by expert; routing U[0, 1) (T, E) fp32,
whose k largest entries per row give topk_ids (k distinct experts); N(0, 1) (T, k) fp32, whose
softmax gives topk_weights. Each source is quantised per tile (1 x block_k for activations,
block_n x block_k for weights): s = max(max|x|, 1e-12) / 448, code = e4m3fn(clamp(x / s, -448, 448)).
Drawing the weights one expert at a time keeps the generator's memory at one expert's bf16
weights (the largest shape holds 11 GB of fp8 codes).
"""

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


def quantise(source: torch.Tensor, block_rows: int, block_cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-scaled e4m3fn codes and fp32 scales of a 2-D tensor, one scale per tile."""
    rows, cols = source.shape
    if rows % block_rows or cols % block_cols:
        raise ValueError(f"({rows}, {cols}) does not split into ({block_rows} x {block_cols}) tiles")
    tiles = source.float().view(rows // block_rows, block_rows, cols // block_cols, block_cols)
    scales = tiles.abs().amax(dim=(1, 3)).clamp_min(1e-12) / FP8_MAX
    codes = (tiles / scales[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return codes.view(rows, cols), scales


def make_inputs(
    *,
    seed: int,
    device="cpu",
    token_count: int,
    hidden_size: int,
    intermediate_size: int,
    num_experts: int,
    top_k: int,
    scale_block_n: int = 128,
    scale_block_k: int = 128,
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    T, D, I, E, bn, bk = token_count, hidden_size, intermediate_size, num_experts, scale_block_n, scale_block_k

    def normal(*shape: int, dtype=torch.bfloat16) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=dtype, device=device)

    hidden_states, a_scale = quantise(normal(T, D) * 0.03, 1, bk)

    def expert_weights(rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
        codes = torch.empty(E, rows, cols, dtype=FP8, device=device)
        scales = torch.empty(E, rows // bn, cols // bk, dtype=torch.float32, device=device)
        for e in range(E):
            codes[e], scales[e] = quantise(normal(rows, cols), bn, bk)
        return codes, scales

    w1, fc1_scale = expert_weights(2 * I, D)
    w2, fc2_scale = expert_weights(D, I)
    routing = torch.rand((T, E), generator=gen, dtype=torch.float32, device=device)
    topk_ids = torch.topk(routing, top_k, dim=-1).indices.to(torch.int32)
    topk_weights = torch.softmax(normal(T, top_k, dtype=torch.float32), dim=-1)
    return {
        "hidden_states": hidden_states,
        "w1": w1,
        "w2": w2,
        "topk_weights": topk_weights,
        "topk_ids": topk_ids,
        "a_scale": a_scale,
        "fc1_scale": fc1_scale,
        "fc2_scale": fc2_scale,
    }
