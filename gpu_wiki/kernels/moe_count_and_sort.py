"""
+++
title = "MoE counting sort in one launch: one program per expert finds its offset by a count of smaller ids, then scatters"
operator = "moe_count_and_sort"
op_family = ["moe"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["moe", "routing", "counting sort", "stable sort", "histogram", "prefix sum", "cumsum", "single launch", "launch bound", "expert offsets", "int32"]
sources = [
  "vLLM moe_align_block_size / count_and_sort_expert_tokens kernels — https://github.com/vllm-project/vllm/blob/main/csrc/moe/moe_align_sum_kernels.cu",
  "Triton API: tl.cumsum, tl.sum — https://triton-lang.org/main/python-api/triton.language.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 5/5 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4"]
shapes_scored = 5
shapes_correct = 5
operator_score = 0.000803
median_time_ms = 0.0089
median_dsl_share = 1
time_ms = { "0" = 0.00406, "1" = 0.00512, "2" = 0.0089, "3" = 0.0113, "4" = 0.0151 }
failures = {}
+++
f = topk_ids flattened (position p = t·k + s), N = T·k. Outputs: expert_token_counts[e] =
#{p : f[p] = e}, cumsum = [0, c0, c0 + c1, ...] (E + 1), sorted_token_ids = the positions
grouped by expert in increasing order within an expert, ids outside [0, E) last.

The operator is launch bound (N ≤ 16 K ids, 64 KB): everything happens in ONE launch with
E + 1 programs and no host sync. Program e scans the ids twice (they stay in L1/L2):
1. offset = #{p : f[p] valid and f[p] < e} and its own count c_e — two reductions, no
   histogram needed because a counting sort's offset is just "how many ids are smaller";
2. scatter: per tile of BLOCK ids, mine = (f == e); the stable rank of each hit is
   cumsum(mine) − 1 plus the hits of earlier tiles, and it is stored at offset + rank.
Program E collects the invalid ids (offset = number of valid ids). Program e also writes
counts[e] and cumsum[e + 1]; program 0 writes cumsum[0] = 0. Every output element is written
by exactly one program, so no atomics and no zero-fill launch are needed.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _count_and_sort(ids_ptr, sorted_ptr, counts_ptr, cumsum_ptr, N, E, BLOCK: tl.constexpr):
    e = tl.program_id(0)
    lane = tl.arange(0, BLOCK)
    less = tl.zeros((BLOCK,), dtype=tl.int32)
    mine = tl.zeros((BLOCK,), dtype=tl.int32)
    for start in range(0, N, BLOCK):
        p = start + lane
        f = tl.load(ids_ptr + p, mask=p < N, other=-1)
        valid = (p < N) & (f >= 0) & (f < E)
        key = tl.where(valid, f, E)  # invalid ids sort as expert E
        less += ((key < e) & (p < N)).to(tl.int32)
        mine += ((key == e) & (p < N)).to(tl.int32)
    offset = tl.sum(less, axis=0)
    count = tl.sum(mine, axis=0)
    if e < E:
        tl.store(counts_ptr + e, count)
        tl.store(cumsum_ptr + e + 1, offset + count)
    if e == 0:
        tl.store(cumsum_ptr, 0)
    seen = offset
    for start in range(0, N, BLOCK):
        p = start + lane
        f = tl.load(ids_ptr + p, mask=p < N, other=-1)
        key = tl.where((f >= 0) & (f < E), f, E)
        hit = (key == e) & (p < N)
        rank = tl.cumsum(hit.to(tl.int32), axis=0)
        tl.store(sorted_ptr + seen + rank - 1, p, mask=hit)
        seen += tl.sum(hit.to(tl.int32), axis=0)


class Model(torch.nn.Module):
    def __init__(self, *, num_experts: int = 128, block_size: int = 128):
        super().__init__()
        self.num_experts = int(num_experts)
        self.block_size = int(block_size)  # not used by the math, kept for the operator's signature

    def forward(self, topk_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        ids = topk_ids.reshape(-1).to(torch.int32)
        n, experts = ids.numel(), self.num_experts
        sorted_ids = torch.empty(n, dtype=torch.int32, device=ids.device)
        counts = torch.empty(experts, dtype=torch.int32, device=ids.device)
        cumsum = torch.empty(experts + 1, dtype=torch.int32, device=ids.device)
        block = min(max(triton.next_power_of_2(n), 128), 4096)
        _count_and_sort[(experts + 1,)](
            ids, sorted_ids, counts, cumsum, n, experts, BLOCK=block, num_warps=4 if block <= 1024 else 8
        )
        return {"sorted_token_ids": sorted_ids, "expert_token_counts": counts, "cumsum": cumsum}
