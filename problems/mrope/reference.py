"""mrope: multimodal rotary position embedding. The R/2 rotary frequency slots are split into
temporal / height / width sections; slot f takes its cos and sin from the table of its own axis.

axis(f), f < R/2:  contiguous  -> 0 if f < s_t, 1 if f < s_t + s_h, else 2
                   interleaved -> 1 if f % 3 == 1 and f <= 3 s_h, 2 if f % 3 == 2 and f <= 3 s_w, else 0
c[t, f] = cos[axis(f), t, f];  s[t, f] = sin[axis(f), t, f]
for every head vector x of q and of k, in fp32 from the original values:
  NeoX:      x1 = x[:R/2], x2 = x[R/2:R];  x[:R/2] = bf16(x1 c - x2 s),  x[R/2:R] = bf16(x2 c + x1 s)
  non-NeoX:  the pairs (x[2f], x[2f+1]) are rotated the same way
dims >= R are unchanged. Output dict {"q", "k"} in the 2-D layout of the inputs.
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(
        self,
        *,
        head_size: int = 128,
        rotary_dim: int = 128,
        mrope_section: list[int] | tuple[int, int, int] = (16, 24, 24),
        mrope_interleaved: bool = False,
        is_neox_style: bool = True,
    ):
        super().__init__()
        if sum(mrope_section) != rotary_dim // 2:
            raise ValueError(f"mrope_section {list(mrope_section)} must sum to rotary_dim / 2 = {rotary_dim // 2}")
        self.head_size = head_size
        self.rotary_dim = rotary_dim
        self.mrope_section = list(mrope_section)
        self.mrope_interleaved = mrope_interleaved
        self.is_neox_style = is_neox_style

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """q (T, Hq * hs), k (T, Hkv * hs) bf16; cos, sin (3, T, R/2) fp32 -> {"q", "k"} bf16."""
        axis = self._slot_axes(cos.device)
        index = axis.view(1, 1, -1).expand(1, cos.shape[1], -1)
        c = cos.gather(0, index)[0][:, None, :]  # (T, 1, R/2), broadcast over heads
        s = sin.gather(0, index)[0][:, None, :]
        return {"q": self._rotate(q, c, s), "k": self._rotate(k, c, s)}

    def _slot_axes(self, device: torch.device) -> torch.Tensor:
        s_t, s_h, s_w = self.mrope_section
        f = torch.arange(self.rotary_dim // 2, device=device)
        if self.mrope_interleaved:
            axis = torch.zeros_like(f)
            axis[(f % 3 == 1) & (f <= 3 * s_h)] = 1
            axis[(f % 3 == 2) & (f <= 3 * s_w)] = 2
            return axis
        return (f >= s_t).long() + (f >= s_t + s_h).long()

    def _rotate(self, x: torch.Tensor, c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        tokens = x.shape[0]
        heads = x.reshape(tokens, -1, self.head_size)
        r = self.rotary_dim
        xr = heads[..., :r].float()
        if self.is_neox_style:
            x1, x2 = xr[..., : r // 2], xr[..., r // 2 :]
        else:
            x1, x2 = xr[..., 0::2], xr[..., 1::2]
        y1 = (x1 * c - x2 * s).to(x.dtype)
        y2 = (x2 * c + x1 * s).to(x.dtype)
        if self.is_neox_style:
            rotated = torch.cat([y1, y2], dim=-1)
        else:
            rotated = torch.stack([y1, y2], dim=-1).flatten(-2)
        return torch.cat([rotated, heads[..., r:]], dim=-1).reshape(tokens, -1)
