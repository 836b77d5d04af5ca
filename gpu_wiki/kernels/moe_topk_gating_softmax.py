"""
+++
title = "MoE router: softmax over experts and top-k by repeated arg-max, several tokens per program"
operator = "moe_topk_gating_softmax"
op_family = ["moe"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["moe", "router", "gating", "softmax", "top-k", "argmax", "group-limited routing", "expert selection", "fp32"]
sources = [
  "Shazeer et al., Outrageously Large Neural Networks: The Sparsely-Gated Mixture-of-Experts Layer, ICLR 2017 — https://arxiv.org/abs/1701.06538",
  "DeepSeek-V2/V3 technical reports (device/group-limited routing) — https://arxiv.org/abs/2412.19437",
  "Triton API: tl.argmax, tl.reshape — https://triton-lang.org/main/python-api/triton.language.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 10/10 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]
shapes_scored = 10
shapes_correct = 10
operator_score = 0.0235
median_time_ms = 0.00778
median_dsl_share = 1
time_ms = { "0" = 0.00512, "1" = 0.00714, "2" = 0.00717, "3" = 0.00758, "4" = 0.00768, "5" = 0.00787, "6" = 0.00941, "7" = 0.0141, "8" = 0.0331, "9" = 0.0605 }
failures = {}
+++
p = softmax(logits) over E experts; optionally keep only the best `topk_group` of
`num_expert_groups` contiguous groups (group score = max p in it, others set to 0); then the
k largest p per token in descending order: {"topk_weights" (T, k) fp32, "topk_ids" (T, k) int32}.

E is 128 or 256, so a token's logits fit one block; a program takes TOKENS = 16 tokens as a
[16, E] tile (8–16 KB) to give each thread real work. Top-k with k = 8 is k rounds of
`tl.argmax` along the expert axis, each followed by masking the winner to -1 (probabilities
are ≥ 0) — cheaper than a sort for k ≪ E and it returns exactly the descending order the
reference's sorted top-k does. `tl.argmax` returns the lowest index among equal maxima.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _router(
    logits_ptr,
    w_ptr,
    id_ptr,
    T,
    E,
    K: tl.constexpr,
    GROUPS: tl.constexpr,
    KEEP_GROUPS: tl.constexpr,
    TOKENS: tl.constexpr,
    BLOCK_E: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64) * TOKENS + tl.arange(0, TOKENS)
    e = tl.arange(0, BLOCK_E)
    mask = (tok < T)[:, None] & (e < E)[None, :]
    x = tl.load(logits_ptr + tok[:, None] * E + e[None, :], mask=mask, other=float("-inf"))
    x = x - tl.max(x, axis=1)[:, None]
    num = tl.exp(x)
    p = num / tl.sum(num, axis=1)[:, None]
    if GROUPS > 0:
        g = tl.reshape(p, (TOKENS, GROUPS, BLOCK_E // GROUPS))
        score = tl.max(g, axis=2)  # [TOKENS, GROUPS]
        keep = tl.zeros((TOKENS, GROUPS), dtype=tl.int1)
        gid = tl.arange(0, GROUPS)[None, :]
        for _ in tl.static_range(KEEP_GROUPS):
            best = tl.argmax(score, axis=1)
            keep = keep | (gid == best[:, None])
            score = tl.where(gid == best[:, None], -1.0, score)
        p = tl.reshape(tl.where(keep[:, :, None], g, 0.0), (TOKENS, BLOCK_E))
    p = tl.where(mask, p, -1.0)
    for j in tl.static_range(K):
        best = tl.argmax(p, axis=1)  # [TOKENS]
        hit = e[None, :] == best[:, None]
        tl.store(w_ptr + tok * K + j, tl.max(tl.where(hit, p, -1.0), axis=1), mask=tok < T)
        tl.store(id_ptr + tok * K + j, best.to(tl.int32), mask=tok < T)
        p = tl.where(hit, -1.0, p)


class Model(torch.nn.Module):
    def __init__(self, *, top_k: int = 8, num_expert_groups: int = 0, topk_group: int = 0):
        super().__init__()
        self.top_k = int(top_k)
        self.num_expert_groups = int(num_expert_groups)
        self.topk_group = int(topk_group)

    def forward(self, gating_output: torch.Tensor) -> dict[str, torch.Tensor]:
        x = gating_output.float().contiguous()
        T, E = x.shape
        grouped = self.num_expert_groups > 0 and self.topk_group > 0
        if grouped and (E % self.num_expert_groups or triton.next_power_of_2(E) != E):
            raise ValueError(f"{E} experts do not split into {self.num_expert_groups} equal power-of-two groups")
        weights = torch.empty((T, self.top_k), dtype=torch.float32, device=x.device)
        ids = torch.empty((T, self.top_k), dtype=torch.int32, device=x.device)
        tokens = 16
        _router[(triton.cdiv(T, tokens),)](
            x,
            weights,
            ids,
            T,
            E,
            K=self.top_k,
            GROUPS=self.num_expert_groups if grouped else 0,
            KEEP_GROUPS=self.topk_group if grouped else 0,
            TOKENS=tokens,
            BLOCK_E=triton.next_power_of_2(E),
            num_warps=4,
        )
        return {"topk_weights": weights, "topk_ids": ids}
