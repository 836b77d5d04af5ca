"""The acceptance rule with injected timings: accepted only when correct and faster beyond the
noise of the interleaved measurement."""

import numpy as np
import pytest

from atrex_mcp.runs.acceptance import AcceptanceRule, PairedSamples, decide


def paired(accepted_ms: float, candidate_ms: float, *, noise: float, n: int = 40, seed: int = 1) -> PairedSamples:
    """n interleaved pairs with a shared per-pair drift (what interleaving cancels) and independent jitter."""
    rng = np.random.default_rng(seed)
    drift = 1.0 + 0.05 * rng.standard_normal(n)  # slow clock/thermal drift common to both sides of a pair
    a = accepted_ms * drift * (1.0 + noise * rng.standard_normal(n))
    c = candidate_ms * drift * (1.0 + noise * rng.standard_normal(n))
    return PairedSamples(accepted_ms=list(np.abs(a)), candidate_ms=list(np.abs(c)))


def test_clear_improvement_is_accepted():
    d = decide({"0": paired(10.0, 8.0, noise=0.01), "1": paired(5.0, 4.0, noise=0.01)}, correct=True)
    assert d.accepted, d.reason
    assert d.speedup == pytest.approx(1.25, rel=0.02)
    assert d.ci_low > 1.0 and d.ci_high >= d.speedup >= d.ci_low
    assert [s.id for s in d.shapes] == ["0", "1"]


def test_gain_inside_the_noise_is_rejected():
    d = decide({"0": paired(10.0, 9.8, noise=0.15, n=20)}, correct=True)
    assert not d.accepted
    assert "noise" in d.reason and d.ci_low <= 1.0


def test_same_gain_is_accepted_when_the_measurement_is_quiet():
    d = decide({"0": paired(10.0, 9.8, noise=0.002, n=60)}, correct=True, rule=AcceptanceRule(min_gain=0.0))
    assert d.accepted, d.reason


def test_a_gain_below_the_minimum_is_rejected_even_beyond_noise():
    d = decide({"0": paired(10.0, 9.95, noise=0.0005, n=60)}, correct=True)
    assert not d.accepted
    assert "minimum gain" in d.reason


def test_interleaving_cancels_drift_that_unpaired_medians_would_mistake_for_noise():
    # Huge common drift, tiny independent jitter: the paired ratio still sees a clean 10% win.
    rng = np.random.default_rng(3)
    drift = np.exp(0.5 * rng.standard_normal(40))
    a, c = 10.0 * drift, 9.0 * drift * (1 + 0.002 * rng.standard_normal(40))
    d = decide({"0": PairedSamples(list(a), list(c))}, correct=True)
    assert d.accepted and d.shapes[0].noise < 0.01


def test_a_regressed_shape_blocks_acceptance():
    samples = {"0": paired(10.0, 6.0, noise=0.01), "1": paired(10.0, 12.0, noise=0.01)}
    d = decide(samples, correct=True)
    assert not d.accepted
    assert "shape 1" in d.reason and "slower" in d.reason


def test_incorrect_or_untimed_candidates_are_rejected():
    assert not decide({"0": paired(10, 5, noise=0.01)}, correct=False, failure="shape 0 wrong").accepted
    untimed = decide(None, correct=True)
    assert not untimed.accepted and "no GPU" in untimed.reason and untimed.speedup is None


def test_too_few_or_unequal_pairs_make_the_measurement_unusable():
    few = decide({"0": PairedSamples([1.0] * 3, [0.5] * 3)}, correct=True)
    assert not few.accepted and "fewer than" in few.reason
    unequal = decide({"0": PairedSamples([1.0] * 20, [0.5] * 19)}, correct=True)
    assert not unequal.accepted and "unequal" in unequal.reason


def test_the_verdict_is_deterministic_for_a_seed():
    samples = {"0": paired(10.0, 9.5, noise=0.03, n=25)}
    assert decide(samples, correct=True, seed=7) == decide(samples, correct=True, seed=7)
