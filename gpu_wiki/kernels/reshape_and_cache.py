"""
+++
title = "KV-cache write (reshape_and_cache): copy the caches, scatter new rows by slot, one kernel for K and V"
operator = "reshape_and_cache"
op_family = ["cache", "attention"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["kv cache", "paged", "scatter", "slot mapping", "copy", "out-of-place", "int64 index", "memory-bound"]
sources = [
  "Kwon et al., Efficient Memory Management for Large Language Model Serving with PagedAttention, SOSP 2023 — https://arxiv.org/abs/2309.06180",
  "Triton tutorial: Vector Addition (masked block copies) — https://triton-lang.org/main/getting-started/tutorials/01-vector-add.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-11-30: measured on shapes [0] of 8 scored; 1 correct"]

[h200]
status = "measured on a subset of shapes"
date = "2026-11-30"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
shapes_measured = ["0"]
shapes_scored = 8
shapes_correct = 1
operator_score_pending = "S over the full shape set: pending; measured on shapes [0]"
median_time_ms = 0.00947
median_dsl_share = 0.421
time_ms = { "0" = 0.00947 }
failures = {}
+++
new_cache = copy(cache); new_cache[slot // bs, slot % bs] = key[n] for every n with slot = slot_mapping[n] ≥ 0
(same for values). The operator is out-of-place, so the whole cache must be copied: that
copy is almost all of the traffic and runs at copy bandwidth (`torch.Tensor.clone`, a device
memcpy). The scatter is one Triton launch covering keys and values: program n moves
token n's key row and value row (each Hkv·D elements contiguous in both source and cache, so each is a vectorised
block copy); negative slots are skipped by a scalar branch. Slots are int64 and row offsets
are computed in int64.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _scatter_rows(key_ptr, value_ptr, kc_ptr, vc_ptr, slot_ptr, row_len, BLOCK: tl.constexpr):
    n = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + n).to(tl.int64)
    if slot >= 0:
        for start in range(0, row_len, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            m = offs < row_len
            tl.store(kc_ptr + slot * row_len + offs, tl.load(key_ptr + n * row_len + offs, mask=m), mask=m)
            tl.store(vc_ptr + slot * row_len + offs, tl.load(value_ptr + n * row_len + offs, mask=m), mask=m)


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        new_k, new_v = key_cache.clone(), value_cache.clone()
        key, value = key.contiguous(), value.contiguous()
        n_tokens = key.shape[0]
        row_len = key[0].numel()  # Hkv * D, the same in the cache's (slot) rows
        if n_tokens:
            block = min(4096, triton.next_power_of_2(row_len))
            _scatter_rows[(n_tokens,)](key, value, new_k, new_v, slot_mapping, row_len, BLOCK=block, num_warps=4)
        return {"key_cache": new_k, "value_cache": new_v}
