"""fused_qkv_rope: optional bias add on a packed QKV activation, split into q, k, v heads, and
rotary position embedding (rotate-half / NeoX pairing: element i pairs with i + R/2) of q and k.

qkv = round(qkv + qkv_bias)                  only when a bias is given, in the input dtype
q, k, v = columns [0, Hq*Dh), next Hkv*Dh, last Hkv*Dh  -> (T, heads, Dh)
inv_freq[i] = 1 / base^(2i / R), i < R/2     fp32 (exponent arange(0, R, 2) / R, power, reciprocal)
e = concat(theta, theta), theta[t, i] = fp32(positions[t]) * inv_freq[i];  c = cos(e), s = sin(e)
for every head vector x of q and k, in fp32:
    xr = x[:R];  rot = concat(-xr[R/2:], xr[:R/2]);  x[:R] = round(xr * c + rot * s)
dims beyond R and all of v are copied unchanged. Output tuple (q, k, v) in the input dtype.
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(
        self,
        *,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int = 128,
        rope_dim: int = 128,
        rope_base: float = 10000.0,
    ):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.rope_dim = rope_dim
        self.rope_base = rope_base

    def forward(
        self, qkv: torch.Tensor, positions: torch.Tensor, qkv_bias: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """qkv (T, (Hq + 2 Hkv) Dh), positions (T,) int32, qkv_bias ((Hq + 2 Hkv) Dh,) or None
        -> q (T, Hq, Dh), k (T, Hkv, Dh), v (T, Hkv, Dh)."""
        if qkv_bias is not None:
            qkv = qkv + qkv_bias
        tokens, dh = qkv.shape[0], self.head_dim
        q_cols, kv_cols = self.num_heads * dh, self.num_kv_heads * dh
        q = qkv[:, :q_cols].reshape(tokens, self.num_heads, dh)
        k = qkv[:, q_cols : q_cols + kv_cols].reshape(tokens, self.num_kv_heads, dh)
        v = qkv[:, q_cols + kv_cols :].reshape(tokens, self.num_kv_heads, dh).clone()

        exponent = torch.arange(0, self.rope_dim, 2, dtype=torch.float32, device=qkv.device) / self.rope_dim
        inv_freq = 1.0 / (self.rope_base**exponent)
        theta = positions.float()[:, None] * inv_freq[None, :]
        angles = torch.cat([theta, theta], dim=-1)[:, None, :]  # (T, 1, R), broadcast over heads
        cos, sin = angles.cos(), angles.sin()
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin), v

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        r, half = self.rope_dim, self.rope_dim // 2
        xr = x[..., :r].float()
        rotated = torch.cat([-xr[..., half:], xr[..., :half]], dim=-1)
        y = (xr * cos + rotated * sin).to(x.dtype)
        return torch.cat([y, x[..., r:]], dim=-1)
