"""Optimisation dropout: which iteration memories a partial restart hides.

Pure and seeded, so the same (eligible set, fraction, seed) always hides the same records and
a test or a person can replay the choice. The store supplies the eligible set (never the
baseline, the accepted kernel, or an already hidden record) and persists the result.
"""

from __future__ import annotations

import math
import random

from atrex_mcp.errors import AtrexError


def mask_count(eligible: int, fraction: float) -> int:
    """How many of `eligible` records a fraction hides: rounded half up, so 0.5 of 3 hides 2."""
    return min(eligible, math.floor(fraction * eligible + 0.5))


def choose_masked(eligible: list[int], fraction: float, seed: int) -> list[int]:
    """A seeded random subset of the eligible iteration numbers, sorted."""
    if not 0.0 <= fraction <= 1.0:
        raise AtrexError("input", "bad_fraction", f"fraction must lie in [0, 1], got {fraction}.")
    pool = sorted(eligible)
    return sorted(random.Random(seed).sample(pool, mask_count(len(pool), fraction)))
