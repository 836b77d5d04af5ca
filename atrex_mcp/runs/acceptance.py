"""The acceptance rule: a candidate replaces the accepted kernel only when it is correct and
faster beyond the noise of the very measurement that compared them.

Input is paired samples from ONE interleaved measurement (accepted, candidate, accepted,
candidate, … on the same GPU, same inputs, same session), so clock drift and thermal state hit
both sides alike and the per-pair ratio a_i/c_i cancels them. The rule:

* per shape, speed-up = median of the pair ratios; its noise = the relative IQR of the ratios;
* aggregate speed-up = geometric mean of the per-shape speed-ups (every target shape counts alike);
* a paired bootstrap (resample pairs within each shape, seeded) gives a 95% interval of the
  aggregate speed-up;
* accept iff every shape is correct, the interval's lower end exceeds 1 (the gain is beyond
  noise), the point estimate is at least 1 + min_gain (the gain is worth a new kernel), and no
  shape is slower beyond noise by more than max_regression.

Pure and deterministic (the bootstrap seed is an argument), so tests inject timings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from atrex_mcp.runs.models import Decision, ShapeTiming

if TYPE_CHECKING:  # numpy is imported where a decision is computed, not when the server starts
    import numpy as np

NOT_TIMED_NO_GPU = "not timed: no GPU timing is available, so the server cannot verify a speed-up"


@dataclass(frozen=True)
class AcceptanceRule:
    """The knobs of the rule, with the defaults argued for in docs/runs.md."""

    confidence: float = 0.95
    min_gain: float = 0.01
    max_regression: float = 0.05
    min_pairs: int = 10
    bootstrap: int = 2000


@dataclass(frozen=True)
class PairedSamples:
    """Times (ms) of the accepted kernel and the candidate, pair i measured back to back."""

    accepted_ms: list[float]
    candidate_ms: list[float]


def _interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    import numpy as np

    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


def shape_timing(
    shape_id: str, pairs: PairedSamples, rule: AcceptanceRule, rng: np.random.Generator
) -> tuple[ShapeTiming, np.ndarray]:
    """Per-shape figures and the bootstrap replicates of this shape's log speed-up."""
    import numpy as np

    a = np.asarray(pairs.accepted_ms, dtype=float)
    c = np.asarray(pairs.candidate_ms, dtype=float)
    log_ratio = np.log(a / c)
    picks = rng.integers(0, len(log_ratio), size=(rule.bootstrap, len(log_ratio)))
    replicates = np.median(log_ratio[picks], axis=1)
    low, high = _interval(replicates, rule.confidence)
    ratio = np.exp(log_ratio)
    q1, median, q3 = np.quantile(ratio, [0.25, 0.5, 0.75])
    timing = ShapeTiming(
        id=shape_id,
        accepted_ms=float(np.median(a)),
        candidate_ms=float(np.median(c)),
        speedup=float(np.exp(np.median(log_ratio))),
        ci_low=float(np.exp(low)),
        ci_high=float(np.exp(high)),
        noise=float((q3 - q1) / median),
        pairs=len(log_ratio),
    )
    return timing, replicates


def _invalid(samples: dict[str, PairedSamples], rule: AcceptanceRule) -> str | None:
    for shape_id, pairs in samples.items():
        if len(pairs.accepted_ms) != len(pairs.candidate_ms):
            return f"shape {shape_id}: unequal numbers of accepted and candidate samples"
        if len(pairs.accepted_ms) < rule.min_pairs:
            return f"shape {shape_id}: {len(pairs.accepted_ms)} pairs, fewer than the {rule.min_pairs} the rule needs"
        if min(pairs.accepted_ms + pairs.candidate_ms) <= 0:
            return f"shape {shape_id}: a non-positive time"
    return None


def decide(
    samples: dict[str, PairedSamples] | None,
    *,
    correct: bool,
    failure: str = "",
    rule: AcceptanceRule = AcceptanceRule(),
    seed: int = 0,
) -> Decision:
    """The verdict on one candidate. `samples` is None when nothing could be timed (no GPU)."""
    if not correct:
        return Decision(accepted=False, reason=f"not correct: {failure}" if failure else "not correct")
    if samples is None:
        return Decision(accepted=False, reason=NOT_TIMED_NO_GPU)
    if not samples:
        return Decision(accepted=False, reason="not timed: the measurement returned no shapes")
    problem = _invalid(samples, rule)
    if problem:
        return Decision(accepted=False, reason=f"measurement unusable: {problem}")

    import numpy as np

    rng = np.random.default_rng(seed)
    shapes: list[ShapeTiming] = []
    replicate_sum = np.zeros(rule.bootstrap)
    for shape_id in sorted(samples):
        timing, replicates = shape_timing(shape_id, samples[shape_id], rule, rng)
        shapes.append(timing)
        replicate_sum += replicates
    aggregate = float(np.exp(np.mean([np.log(s.speedup) for s in shapes])))
    low, high = (float(np.exp(v)) for v in _interval(replicate_sum / len(shapes), rule.confidence))
    figures: dict[str, Any] = {"speedup": aggregate, "ci_low": low, "ci_high": high, "shapes": shapes}

    regressed = [s for s in shapes if s.ci_high < 1.0 / (1.0 + rule.max_regression)]
    pct = round(rule.confidence * 100)
    if regressed:
        worst = min(regressed, key=lambda s: s.speedup)
        reason = (
            f"shape {worst.id} is slower beyond noise ({worst.speedup:.3f}x, {pct}% CI up to {worst.ci_high:.3f}x),"
            f" a regression over the {rule.max_regression:.0%} allowed"
        )
        return Decision(accepted=False, reason=reason, **figures)
    if low <= 1.0:
        reason = f"not faster beyond measured noise: {aggregate:.3f}x, {pct}% CI [{low:.3f}, {high:.3f}] includes 1"
        return Decision(accepted=False, reason=reason, **figures)
    if aggregate < 1.0 + rule.min_gain:
        reason = f"faster beyond noise but by {aggregate:.3f}x, under the {rule.min_gain:.0%} minimum gain"
        return Decision(accepted=False, reason=reason, **figures)
    return Decision(
        accepted=True,
        reason=f"faster beyond measured noise: {aggregate:.3f}x, {pct}% CI [{low:.3f}, {high:.3f}]",
        **figures,
    )
