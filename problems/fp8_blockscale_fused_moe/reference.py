"""fp8_blockscale_fused_moe: mixture-of-experts SwiGLU feed-forward layer whose activations and
weights arrive as fp8 e4m3fn codes with block scales (1 x block_k for activations,
block_n x block_k for weights). Everything is dequantised to fp32; every (token, slot) runs
through its expert; the slot outputs are combined with the routing weights.

  X[t, c]    = fp32(hidden[t, c]) * a_scale[t, c // block_k]
  W1[e, n, c] = fp32(w1[e, n, c]) * fc1_scale[e, n // block_n, c // block_k]   (rows [0, I) gate, [I, 2I) up)
  W2[e, m, i] = fp32(w2[e, m, i]) * fc2_scale[e, m // block_n, i // block_k]
  for every (t, s) with e = topk_ids[t, s] in [0, E):  [G | U] = W1[e] X[t];  Y[t, s] = W2[e] (silu(G) * U)
  (slots with an id outside [0, E) contribute 0)
  out[t] = e4m3fn( clamp( sum_s topk_weights[t, s] * Y[t, s], -448, 448 ) )

The final cast saturates at the e4m3fn maximum 448. The source cast without a clamp; a
non-saturating cast turns every magnitude above 464 into NaN (about 0.01 % of the outputs at
hidden size 7168); here such values become +-448 instead, and everything within +-448 is
unchanged. e4m3fn is the NVIDIA fp8 format; the source's e4m3fnuz (max 240) is a ROCm format
(see problems/CHANGES.md).
"""

import torch
from torch import nn
from torch.nn import functional as F

FP8_MAX = 448.0  # float8_e4m3fn


def dequantise(codes: torch.Tensor, scales: torch.Tensor, block_rows: int, block_cols: int) -> torch.Tensor:
    """fp32 value of block-scaled fp8 codes: each (block_rows x block_cols) tile times its scale."""
    rows, cols = codes.shape
    tile_scales = scales.float().repeat_interleave(block_rows, 0).repeat_interleave(block_cols, 1)
    return codes.float() * tile_scales[:rows, :cols]


class Model(nn.Module):
    def __init__(
        self,
        *,
        num_experts: int,
        intermediate_size: int,
        top_k: int = 8,
        scale_block_n: int = 128,
        scale_block_k: int = 128,
    ):
        super().__init__()
        self.num_experts = int(num_experts)
        self.intermediate_size = int(intermediate_size)
        self.top_k = int(top_k)
        self.scale_block_n = int(scale_block_n)
        self.scale_block_k = int(scale_block_k)

    def forward(
        self,
        hidden_states: torch.Tensor,
        w1: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        a_scale: torch.Tensor,
        fc1_scale: torch.Tensor,
        fc2_scale: torch.Tensor,
    ) -> torch.Tensor:
        """hidden_states (T, D), w1 (E, 2I, D), w2 (E, D, I) float8_e4m3fn; topk_weights (T, k) fp32;
        topk_ids (T, k) int32; a_scale (T, D/bk), fc1_scale (E, 2I/bn, D/bk), fc2_scale (E, D/bn, I/bk) fp32
        -> out (T, D) float8_e4m3fn."""
        mixed = self.mixture_fp32(hidden_states, w1, w2, topk_weights, topk_ids, a_scale, fc1_scale, fc2_scale)
        return mixed.clamp(-FP8_MAX, FP8_MAX).to(hidden_states.dtype)

    def mixture_fp32(
        self,
        hidden_states: torch.Tensor,
        w1: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        a_scale: torch.Tensor,
        fc1_scale: torch.Tensor,
        fc2_scale: torch.Tensor,
    ) -> torch.Tensor:
        """The fp32 result before the final cast, (T, D)."""
        bn, bk = self.scale_block_n, self.scale_block_k
        experts, inter = w1.shape[0], w1.shape[1] // 2
        tokens, slots = topk_ids.shape
        x = dequantise(hidden_states, a_scale, 1, bk)
        ids = topk_ids.long()
        weighted = torch.zeros(tokens, slots, x.shape[1], dtype=torch.float32, device=x.device)
        for e in range(experts):
            token_idx, slot_idx = torch.nonzero(ids == e, as_tuple=True)
            if token_idx.numel() == 0:
                continue
            gate_up = x[token_idx] @ dequantise(w1[e], fc1_scale[e], bn, bk).t()
            act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
            y = act @ dequantise(w2[e], fc2_scale[e], bn, bk).t()
            weighted[token_idx, slot_idx] = topk_weights[token_idx, slot_idx].float().unsqueeze(1) * y
        return weighted.sum(dim=1)
