"""Inputs for block_scaled_mm (F = 448, the e4m3fn maximum).

Draw order: b_raw (N, K) fp32 N(0, 1); then, in row chunks of 65 536, a_raw (rows, K) fp32 N(0, 1).
Weights: per gn x gk tile, scale = max(signed tile maximum / F, 1e-10) and
b = e4m3fn(clamp(b_raw / scale, -F, F)) — the most negative entries of a tile may saturate at -F.
Activations: per row and gk-wide group, scale = max(max|a_raw| / F, 1e-10) and
a = e4m3fn(clamp(a_raw / scale, -F, F)).
"""

import torch

FP8_MAX = 448.0
A_ROW_CHUNK = 65536


def _quantise(raw: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return (raw / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def make_inputs(
    *, seed: int, device="cpu", m: int, n: int, k: int, group_n: int = 128, group_k: int = 128
) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    nkb = k // group_k

    b_raw = torch.randn(n, k, generator=gen, dtype=torch.float32, device=device)
    tiles = b_raw.view(n // group_n, group_n, nkb, group_k)
    b_scales = (tiles.amax(dim=(1, 3)) / FP8_MAX).clamp(min=1e-10)  # (N/gn, nkb)
    b = _quantise(tiles, b_scales[:, None, :, None]).view(n, k)

    a = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=device)
    a_scales = torch.empty(m, nkb, dtype=torch.float32, device=device)
    for r0 in range(0, m, A_ROW_CHUNK):
        rows = min(A_ROW_CHUNK, m - r0)
        groups = torch.randn(rows, nkb, group_k, generator=gen, dtype=torch.float32, device=device)
        scale = (groups.abs().amax(dim=-1) / FP8_MAX).clamp(min=1e-10)
        a[r0 : r0 + rows] = _quantise(groups, scale[..., None]).view(rows, k)
        a_scales[r0 : r0 + rows] = scale
    return {"a": a, "b": b, "a_scales": a_scales, "b_scales": b_scales}
