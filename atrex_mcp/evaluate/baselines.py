"""The reference evaluated as a candidate: eager as written, or under torch.compile.

Both run through the same sandbox, gate and timing as any candidate, so baseline and
candidate times are measured identically. The torch.compile wrapper compiles each shape
statically (one graph per shape, as a tuned deployment would) and lifts Dynamo's
recompile limit so later shapes are not silently left in eager mode.
"""

from __future__ import annotations

from atrex_mcp.problemset.catalog import VisibleProblem

TORCH_COMPILE_SOURCE = '''"""Baseline: the reference under torch.compile (static shapes, one graph per shape)."""

import torch
import torch._dynamo

import reference

for _limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
    if hasattr(torch._dynamo.config, _limit):
        setattr(torch._dynamo.config, _limit, 4096)


class Model(reference.Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._compiled = torch.compile(super().forward, dynamic=False)

    def forward(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)
'''


def baseline_source(kind: str, problem: VisibleProblem) -> str:
    """Candidate text for a baseline; the reference file sits next to it in the scratch dir."""
    if kind == "eager":
        return problem.reference_source
    if kind == "torch-compile":
        return TORCH_COMPILE_SOURCE
    raise ValueError(f"unknown baseline {kind!r}")
