"""Noise-aware decisions on a timing run's raw per-call figures (trusted side, pure functions).

Short kernels time with a spread comparable to their median (host wake-up latency after a
device synchronisation, clock changes), so a rule that compares two medians with a fixed
ratio raises incidents on honest kernels. Each decision here needs an effect that is large in
absolute terms (µs), large relative to the call, beyond the measured noise, and present on a
majority of calls — one slow call never decides.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from sandbox.timing import REUSE_MIN_CALLS

# Side-stream work: the post-synchronisation gap beyond the no-op calibration must exceed all of these.
SIDE_STREAM_MIN_US = 20.0
SIDE_STREAM_MIN_FRACTION_OF_CALL = 0.5
SIDE_STREAM_NOISE_IQRS = 3.0
SIDE_STREAM_MAJORITY = 0.6
# Input reuse: reused-set calls faster than fresh-set calls of the same phase by all of these.
REUSE_MIN_EFFECT = 0.3  # relative: a cache skips most of the work, honest reuse gains a few %
REUSE_MIN_US = 2.0
REUSE_Z = 3.0
# Host-bound: the host outran the GPU spin on more than this share of the timed calls.
HOST_BOUND_SHARE = 0.5


def _iqr(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q3 - q1


@dataclass
class SideStreamVerdict:
    detected: bool
    excess_ms: float  # median post-sync gap beyond the calibration
    threshold_ms: float
    per_call_ms: list[float]  # the times to report: synced − calibration when detected, else the event times


def side_stream(times_ms: list[float], synced_ms: list[float], noop_gap_ms: list[float]) -> SideStreamVerdict:
    """Work left on another stream shows as a post-sync gap larger than a no-op call's.
    Detected when the median excess exceeds max(20 µs, half the call, 3 IQRs of the
    calibration) and a majority of calls exceed it; then that work is counted in every call."""
    gap0 = statistics.median(noop_gap_ms)
    excess = [(s - t) - gap0 for t, s in zip(times_ms, synced_ms)]
    threshold = max(
        SIDE_STREAM_MIN_US / 1e3,
        SIDE_STREAM_MIN_FRACTION_OF_CALL * statistics.median(times_ms),
        SIDE_STREAM_NOISE_IQRS * _iqr(noop_gap_ms),
    )
    median_excess = statistics.median(excess)
    majority = sum(e > threshold for e in excess) >= SIDE_STREAM_MAJORITY * len(excess)
    detected = median_excess > threshold and majority
    per_call = [max(s - gap0, t) for t, s in zip(times_ms, synced_ms)] if detected else list(times_ms)
    return SideStreamVerdict(detected, median_excess, threshold, per_call)


def side_stream_pooled(runs: list[tuple[list[float], list[float], list[float]]]) -> SideStreamVerdict:
    """`side_stream` over several short runs of one kernel, each run's gaps taken relative to its
    own no-op calibration: a run of a couple of dozen calls is too small to decide alone (a
    shift in host wake-up latency for one run's length looks like hidden work), the pooled
    runs hold as many calls as a full timing stage. `per_call_ms` is the pooled event times."""
    times, synced, noop = [], [], []
    for run_times, run_synced, run_noop in runs:
        gap0 = statistics.median(run_noop)
        times += run_times
        synced += [s - gap0 for s in run_synced]
        noop += [g - gap0 for g in run_noop]
    return side_stream(times, synced, noop)


@dataclass
class ReuseVerdict:
    detected: bool
    decided: bool  # False when too few fresh or reused calls share a phase to compare
    fresh_ms: float | None
    reused_ms: float | None


def _median_se(values: list[float]) -> float:
    """Standard error of a median from the IQR (σ ≈ IQR/1.349, SE ≈ 1.253 σ/√n)."""
    return 1.253 * (_iqr(values) / 1.349) / math.sqrt(len(values))


def input_reuse(per_call_ms: list[float], first_visit: list[bool], phase_start: int) -> ReuseVerdict:
    """Compare calls on fresh sets with calls on reused sets interleaved with them (from
    `phase_start` on), so clock ramps and drift affect both groups alike. Detected when the
    reused median is lower by ≥ 30 %, ≥ 2 µs and ≥ 3 standard errors of the difference."""
    fresh = [t for t, f in zip(per_call_ms[phase_start:], first_visit[phase_start:]) if f]
    reused = [t for t, f in zip(per_call_ms[phase_start:], first_visit[phase_start:]) if not f]
    if len(fresh) < REUSE_MIN_CALLS or len(reused) < REUSE_MIN_CALLS:
        return ReuseVerdict(False, False, None, None)
    m_fresh, m_reused = statistics.median(fresh), statistics.median(reused)
    gain = m_fresh - m_reused
    noise = REUSE_Z * math.hypot(_median_se(fresh), _median_se(reused))
    detected = gain > max(REUSE_MIN_EFFECT * m_fresh, REUSE_MIN_US / 1e3, noise)
    return ReuseVerdict(detected, True, m_fresh, m_reused)


def host_bound(late_calls: int | None, calls: int) -> bool | None:
    """Whether a run's time follows the host rather than the GPU: on most calls the host's
    launch work outlasted the spin, so the GPU waited for launches inside the timed region.
    Such times move with host load (torch.compile baseline on the H200, two runs each beside
    another evaluation on the same host: median 12 %, p90 43 % apart, against 0.4 % / 1.2 %
    for GPU-bound shapes; measured by measurements/stability.py)."""
    if late_calls is None or calls <= 0:
        return None
    return late_calls > HOST_BOUND_SHARE * calls
