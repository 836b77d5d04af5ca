"""The timing decisions with injected per-call figures: honest noisy timings raise nothing,
the exploits' signatures are flagged; the call schedule interleaves fresh and reused sets;
output digests are exact and tell outputs apart."""

from __future__ import annotations

import random

import torch

from atrex_mcp.evaluate.timing_checks import input_reuse, side_stream
from sandbox.timing import call_order, digest, input_checksums, poison, reuse_phase


def _noisy(rng: random.Random, median_ms: float, n: int, spread: float) -> list[float]:
    """Short-kernel-like times: mostly near the median, a heavy tail of slow calls."""
    return [median_ms * (1 + spread * rng.random()) + (rng.random() < 0.15) * 3 * median_ms for _ in range(n)]


def test_honest_noisy_calls_raise_no_side_stream_flag():
    rng = random.Random(1)
    for median in (0.02, 0.07, 0.1):
        times = _noisy(rng, median, 200, 0.5)
        # post-sync gap: 8 µs of wake-up latency with jitter, a few calls descheduled for 60 µs
        synced = [t + 0.008 + 0.004 * rng.random() + (rng.random() < 0.2) * 0.06 for t in times]
        noop = [0.008 + 0.004 * rng.random() for _ in range(50)]
        verdict = side_stream(times, synced, noop)
        assert not verdict.detected and verdict.per_call_ms == times


def test_side_stream_work_is_flagged_and_counted():
    rng = random.Random(2)
    times = [0.004 + 0.001 * rng.random() for _ in range(168)]  # the call returns at once ...
    synced = [t + 0.008 + 0.18 + 0.01 * rng.random() for t in times]  # ... and 180 µs run on a side stream
    noop = [0.008 + 0.002 * rng.random() for _ in range(50)]
    verdict = side_stream(times, synced, noop)
    assert verdict.detected
    assert min(verdict.per_call_ms) > 0.18  # the hidden work is in every reported time


def test_one_slow_sync_does_not_decide():
    times = [0.05] * 100
    synced = [0.06] * 60 + [2.0] * 40  # a minority of calls with a long gap
    assert not side_stream(times, synced, [0.01] * 20).detected


def test_call_order_interleaves_fresh_sets_with_reused_ones():
    order = call_order(16, 200)
    assert sorted(set(order)) == list(range(16)) and len(order) == 200
    first, phase = reuse_phase(16, 200)
    assert phase == 8 and all(first[:8]) and sum(first[phase:]) == 8
    fresh_calls = [i for i in range(phase, 200) if first[i]]
    assert fresh_calls[0] > phase + 10 and fresh_calls[-1] > 150  # spread over the phase, not bunched
    assert call_order(200, 150) == list(range(150)) and reuse_phase(200, 150)[1] == 150


def test_honest_drifting_timings_raise_no_reuse_flag():
    rng = random.Random(3)
    first, phase = reuse_phase(38, 200)
    # clocks ramp up: the first calls are twice as slow, and noise is heavy, for fresh and reused alike
    per_call = [
        0.069 * (2.0 if i < 30 else 1.0) * (1 + 0.4 * rng.random()) + (rng.random() < 0.1) * 0.2 for i in range(200)
    ]
    verdict = input_reuse(per_call, first, phase)
    assert verdict.decided and not verdict.detected


def test_cache_on_reused_sets_is_flagged():
    rng = random.Random(4)
    first, phase = reuse_phase(64, 200)
    per_call = [(0.2 if f else 0.01) * (1 + 0.2 * rng.random()) for f in first]
    assert input_reuse(per_call, first, phase).detected


def test_reuse_undecided_with_few_fresh_calls():
    first, phase = reuse_phase(3, 200)
    verdict = input_reuse([0.1 if f else 0.001 for f in first], first, phase)
    assert not verdict.decided and not verdict.detected


def test_digest_is_exact_and_tells_outputs_apart():
    a = torch.randn(3, 128).to(torch.bfloat16)
    b = torch.randn(3, 128).to(torch.bfloat16)
    assert digest(a).tolist() == digest(a.clone()).tolist() != digest(b).tolist()
    assert digest((a, b)).tolist()[:2] == digest(a).tolist()
    swapped = a.clone().reshape(-1)
    swapped[[0, 1]] = swapped[[1, 0]]
    if swapped[0] != swapped[1]:
        assert digest(swapped.reshape(3, 128)).tolist() != digest(a).tolist()  # position-weighted, not a plain sum
    stale = a.clone()
    poison(stale, set())
    assert digest(stale).tolist() != digest(a).tolist()
    assert digest(a.t()).tolist() == digest(a.t().contiguous()).tolist()


def test_input_checksums_are_exact_byte_sums_for_any_chunk_size():
    inputs = {
        "x": torch.randn(1000, 37).to(torch.bfloat16),
        "idx": torch.randint(0, 1 << 30, (999,)),
        "view": torch.randn(64, 48).t(),
        "empty": torch.empty(0),
        "eps": 1e-6,
    }
    exact = {
        name: int(t.contiguous().view(-1).view(torch.uint8).to(torch.int64).sum())
        for name, t in inputs.items()
        if isinstance(t, torch.Tensor)
    }
    assert (
        input_checksums(inputs) == input_checksums(inputs, chunk=97) == input_checksums(inputs, chunk=1 << 20) == exact
    )


def test_digest_is_the_same_for_any_chunk_size():
    a = torch.randn(1000, 37)
    whole = digest(a, chunk=a.numel() * 4).tolist()
    assert digest(a, chunk=97).tolist() == digest(a, chunk=4096).tolist() == whole
    assert digest(torch.empty(0)).tolist() == [0, 0]
