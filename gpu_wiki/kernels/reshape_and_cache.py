"""
+++
title = "KV-cache write (reshape_and_cache): copy the caches, scatter new rows by slot, two Triton launches for K and V"
operator = "reshape_and_cache"
op_family = ["cache", "attention"]
dsl = ["triton"]
hardware = ["hopper", "any"]
tags = ["kv cache", "paged", "scatter", "slot mapping", "copy", "out-of-place", "int64 index", "memory-bound"]
sources = [
  "Kwon et al., Efficient Memory Management for Large Language Model Serving with PagedAttention, SOSP 2023 — https://arxiv.org/abs/2309.06180",
  "Triton tutorial: Vector Addition (masked block copies) — https://triton-lang.org/main/getting-started/tutorials/01-vector-add.html",
]
validated_shapes = ["smoke (CPU interpreter, CI)", "NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: 8/8 scored shapes correct"]

[h200]
status = "measured"
date = "2026-12-02"
gpu = "NVIDIA H200"
torch = "2.11.0+cu130"
triton = "3.6.0"
source = "bench eval of run 'run': the full wiki kernel set (30 operators) judged as one candidate set, 5 seeds per shape, shapes 'all'"
seeds = 5
shapes_measured = ["0", "1", "2", "3", "4", "5", "6", "7"]
shapes_scored = 8
shapes_correct = 8
operator_score = 0.214
median_time_ms = 0.0117
median_dsl_share = 1
time_ms = { "0" = 0.00752, "1" = 0.00733, "2" = 0.00906, "3" = 0.01, "4" = 0.0133, "5" = 0.0217, "6" = 0.0142, "7" = 0.0219 }
failures = {}
+++
new_cache = copy(cache); new_cache[slot // bs, slot % bs] = key[n] for every n with slot = slot_mapping[n] ≥ 0
(same for values). The operator is out-of-place, so the whole cache must be copied: that
copy is almost all of the traffic and runs at copy bandwidth. It is a Triton launch of its
own (`_copy_caches`: each program copies one BLOCK-element chunk of the key cache and the same
chunk of the value cache), not `torch.Tensor.clone`: a device memcpy per cache is two launches
the framework makes, and the judge counts their time as not the candidate's DSL. On the H200
(full-set judgement, 5 seeds) the clone version had a DSL share of 0.41–0.45 and S 0.113; this
one has 1.0 and S 0.214, one launch fewer. The scatter is a second launch covering keys
and values: program n moves token n's key row and value row (each Hkv·D elements contiguous in
both source and cache, so each is a vectorised block copy); negative slots are skipped by a
scalar branch. It runs after the copy on the same stream, so no copied row overwrites a
scattered one. Slots and offsets are int64.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_caches(kc_ptr, vc_ptr, new_kc_ptr, new_vc_ptr, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < numel
    tl.store(new_kc_ptr + offs, tl.load(kc_ptr + offs, mask=m), mask=m)
    tl.store(new_vc_ptr + offs, tl.load(vc_ptr + offs, mask=m), mask=m)


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


COPY_BLOCK = 2048  # elements of each cache per program of the copy


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
        key_cache, value_cache = key_cache.contiguous(), value_cache.contiguous()
        new_k, new_v = torch.empty_like(key_cache), torch.empty_like(value_cache)
        numel = key_cache.numel()
        if numel:
            _copy_caches[(triton.cdiv(numel, COPY_BLOCK),)](
                key_cache, value_cache, new_k, new_v, numel, BLOCK=COPY_BLOCK, num_warps=4
            )
        key, value = key.contiguous(), value.contiguous()
        n_tokens = key.shape[0]
        row_len = key[0].numel()  # Hkv * D, the same in the cache's (slot) rows
        if n_tokens:
            block = min(4096, triton.next_power_of_2(row_len))
            _scatter_rows[(n_tokens,)](key, value, new_k, new_v, slot_mapping, row_len, BLOCK=block, num_warps=4)
        return {"key_cache": new_k, "value_cache": new_v}
