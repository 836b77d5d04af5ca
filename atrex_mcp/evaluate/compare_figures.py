"""What the two paths that judge an output's numbers share (atrex_mcp.evaluate.compare's torch
rules and compare_kernel's one pass): the rules' names, the figures a pass reports, the block
of the RMS pre-pass and the dtypes the one pass takes. Its own module so that compare, which
must not load Triton, and compare_kernel, which is Triton, both import it and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

Rule = Literal["allclose", "exact", "fp8_codes", "ranked_ids"]

RMS_BLOCK = 4096  # elements per exactly-added partial sum of squares (a power of two)


FP8_DTYPES = frozenset({torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz})

# Dtypes compare_kernel judges in one pass, per rule (bool as its bytes, 0 and 1; fp8 as its codes).
ONE_PASS_DTYPES: dict[Rule, frozenset[torch.dtype]] = {
    "allclose": frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64}),
    "exact": frozenset(
        {torch.float16, torch.bfloat16, torch.float32, torch.float64}
        | {torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool}
    ),
    "fp8_codes": FP8_DTYPES,
}


@dataclass(frozen=True)
class Figures:
    """What a rule found in a stretch of one output (a chunk, or all of it): counts, maxima and
    the first bad element, so stretches merge in any order and neither the chunk size nor the
    path that judged them (torch, or compare_kernel's one pass) changes them."""

    max_abs: float = 0.0  # |c − r| where both are finite (0 when none is)
    max_rel: float = 0.0  # |c − r| / |r| where both are finite and r ≠ 0 (0 when none is)
    mismatches: int = 0
    nonfinite_mismatches: int = 0
    first: int | None = None  # flat index of the first bad element

    def merged(self, other: Figures) -> Figures:
        firsts = [i for i in (self.first, other.first) if i is not None]
        return Figures(
            max_abs=max(self.max_abs, other.max_abs),
            max_rel=max(self.max_rel, other.max_rel),
            mismatches=self.mismatches + other.mismatches,
            nonfinite_mismatches=self.nonfinite_mismatches + other.nonfinite_mismatches,
            first=min(firsts) if firsts else None,
        )


@dataclass(frozen=True)
class CodeFigures:
    """What the fp8 rule found in one output: both of its tallies, whose counts and first bad
    element differ (every code off the reference's is bad / only codes more than the tolerated
    steps away are), and how many codes are off by no more than the tolerated steps (near), whose
    share of the output picks the tally. Both tallies count NaN disagreement as bad and as their
    non-finite mismatches, and share the maxima."""

    every_off: Figures = field(default_factory=Figures)
    far_only: Figures = field(default_factory=Figures)
    near: int = 0
