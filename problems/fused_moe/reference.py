"""fused_moe: mixture-of-experts SwiGLU feed-forward layer with bf16 weights, computed in fp32
and returned in fp32.

out = 0 (T, D) fp32. For e = 0 .. E-1 in increasing order:
  c_e[t] = sum_s topk_weights[t, s] * [topk_ids[t, s] == e]   (a token that picked e twice is
           processed once, with the summed weight)
  for the tokens with c_e[t] != 0:  X = fp32(hidden[t]);  [G | U] = X fp32(w1[e])^T  (G = first I)
           out[t] += (silu(G) * U) fp32(w2[e])^T * c_e[t]
"""

import torch
from torch import nn
from torch.nn import functional as F


class Model(nn.Module):
    def __init__(self, *, num_experts: int, intermediate_size: int, top_k: int):
        super().__init__()
        self.num_experts = int(num_experts)
        self.intermediate_size = int(intermediate_size)
        self.top_k = int(top_k)

    def forward(
        self,
        hidden_states: torch.Tensor,
        w1: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
    ) -> torch.Tensor:
        """hidden_states (T, D) bf16; w1 (E, 2I, D) bf16; w2 (E, D, I) bf16; topk_weights (T, k) fp32;
        topk_ids (T, k) int32 -> out (T, D) fp32."""
        experts, inter = w1.shape[0], w1.shape[1] // 2
        out = torch.zeros(hidden_states.shape, dtype=torch.float32, device=hidden_states.device)
        ids = topk_ids.long()
        for e in range(experts):
            combined = (topk_weights.float() * (ids == e)).sum(dim=1)
            tokens = torch.nonzero(combined != 0).squeeze(1)
            if tokens.numel() == 0:
                continue
            x = hidden_states[tokens].float()
            gate_up = x @ w1[e].float().t()
            act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
            y = act @ w2[e].float().t()
            out[tokens] += y * combined[tokens].unsqueeze(1)  # tokens are distinct
        return out
