"""The judge's own witness of a candidate's time (trusted side, pure functions).

The worker's times are the candidate's word: it shares the worker's process and can rewrite
anything there. The judge holds two figures of its own clock:

* the wall of the timing request, from sending it to reading the reply: every reported call
  lies inside it, so Σ call times above it is an inconsistency (`upper_bound_ok`);
* a burst (`sandbox.worker.Worker.burst`): K forwards on input sets made from fresh seeds,
  back to back, one synchronisation, then their digests. The judge times that request and
  subtracts what it calibrates in its own process (a round trip of an empty request, making
  the same K input sets, digesting K outputs of the reference's size); what is left over, per
  call, is the witness: `max(T_warm, host)` for an honest kernel, where T_warm is its device
  time with its inputs in L2 and `host` the host's time to launch one call. One output of the
  burst is compared with the reference, so the calls did the work.

A reported median `t` is forged when it lies below the witness's floor:

    floor = (witness − host_allowance − jitter) / TOLERANCE

`host_allowance` is the median host window the worker reported (on CPU, where the event time
is the host window itself, zero), capped by the judge's wall of the timing request per call;
`jitter` (`slack_ms`) covers the request's scheduling noise and the error of the judge's
calibration. An honest GPU-bound kernel has witness ≈ T_warm ≤ t; an honest host-bound one has
witness ≈ host, so the floor is ~0. Written as witness = T_warm + e, with e whatever the model
leaves out, an honest run is flagged only when e > (TOLERANCE − 1)·t + host + jitter: the noise
would have to exceed the kernel's own time, its host window and the slack together.

What it bounds (docs/threat-model.md): a candidate can report no less than
(T_warm − host_claimed − jitter) / TOLERANCE, so a forgery that hides its work must also claim
a host window as large as what it hides, and no host window larger than the judge's wall
allows. For a kernel whose launch outlasts its device time (rms_norm's small shapes: ~25 µs to
launch, ~4 µs on the device) the floor is ~0, and only the worker's bound timing loop stands
between the candidate and its reported time: the graph burst below closes that on a GPU.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

TOLERANCE = 2.0  # reported times may lie this far below the floor's raw figure (clock ramps, warm vs cold L2)
# On the H200 an honest rms_norm shape 0 (6.7 µs) once left 0.25 ms per call over a 16-call burst where
# its host window and a quarter of the calibration allowed 0.23 ms: the worker's own input generation and
# digests can cost as much again as the judge's calibration of them (measurements/forged_timing_gpu.py).
JITTER_S = 1e-3  # the fastest burst's wall spread an honest run may still show (scheduler, pipe, first calls)
CALIBRATION_SLACK = 1.0  # share of the judge's own input-generation and digest time allowed as calibration error
WITNESS_CALLS = 16  # forwards in a burst (fewer for long calls, and where the timing stage held fewer input sets)
# A burst of at least this much work makes the request's round trip and jitter negligible: JITTER_S is 0.2 % of it.
WITNESS_BURST_S = 0.5
WITNESS_BURSTS = 3  # the fastest of these judges: scheduling noise only ever adds time
WARMUP_S = 2e-3  # the worker's GPU work (sandbox.timing.warm_clocks) just before each burst or replay the judge times


@dataclass
class Calibration:
    """What the judge measured in its own process for one burst."""

    round_trip_s: float  # an empty request to the worker and back (minimum of a few)
    inputs_s: float  # making the burst's input sets here
    digests_s: float  # digesting that many outputs of the reference's size here


@dataclass
class Witness:
    """The burst's figures and the verdict on one reported median."""

    calls: int
    wall_s: float  # the judge's clock around the burst request
    per_call_ms: float  # what is left of it per call once the calibration is taken off
    floor_ms: float  # the least median the witness allows
    forged: bool
    graph: bool = False  # a replay of the graph burst (judge_graph), not the plain burst
    subtracted_ms: float = 0.0  # graph: the input refresh and fingerprints taken off, per call
    slack_ms: float = 0.0  # graph: the allowance per call for request noise and calibration error


def burst_calls(median_ms: float) -> int:
    """Forwards in a burst for a call of `median_ms`: WITNESS_CALLS, or fewer where fewer already
    make WITNESS_BURST_S of work, and at least 2. The floor's jitter allowance is per burst and
    divided by its calls (`slack_ms`, `graph_slack_ms`; the calibration is of the burst's own K
    sets), so a burst of WITNESS_BURST_S keeps it under 0.2 % of the median however few calls it
    holds: 0.5 ms a call for two calls of 1.34 s (0.1 ms in a graph). The median is the candidate's word, and
    safe to size by: a forged small one (or none a number can read) only lengthens the burst; a
    forged large one only raises the time the shape is scored with, which is never below the
    reported median and, for a forward no graph replay judged, never below the judge's own wall
    per call (`scored_time_ms`)."""
    if not median_ms > WITNESS_BURST_S * 1e3 / WITNESS_CALLS:  # a short call, or no number at all
        return WITNESS_CALLS
    return max(2, math.ceil(WITNESS_BURST_S * 1e3 / median_ms))


def witness_calls(median_ms: float, sets: int) -> int:
    """Forwards in each plain burst: `burst_calls`, no more than the input sets the timing stage held."""
    return min(burst_calls(median_ms), sets)


def per_call_ms(wall_s: float, calls: int, calibration: Calibration) -> float:
    """The burst's wall per call once the judge's calibrated overheads are taken off (≥ 0)."""
    rest = wall_s - calibration.round_trip_s - calibration.inputs_s - calibration.digests_s
    return max(0.0, rest) / max(1, calls) * 1e3


def host_allowance_ms(host_us: list[float] | None, cuda: bool, request_wall_s: float, calls: int) -> float:
    """The host window per call the floor allows: the worker's median, never more than the
    judge's wall of the timing request per call; zero on CPU (the host window is the call)."""
    if not cuda or not host_us:
        return 0.0
    return min(statistics.median(host_us) / 1e3, request_wall_s * 1e3 / max(1, calls))


def slack_ms(calls: int, calibration: Calibration) -> float:
    """The floor's allowance per call for noise and calibration error. An honest run trips the
    floor only when what the model leaves out exceeds its own time, its host window and this."""
    return (JITTER_S + CALIBRATION_SLACK * (calibration.inputs_s + calibration.digests_s)) / max(1, calls) * 1e3


def judge(median_ms: float, wall_s: float, calls: int, calibration: Calibration, host_ms: float) -> Witness:
    """The witness of a burst of `calls` forwards timed at `wall_s` by the judge, and whether
    `median_ms` lies below its floor."""
    witness = per_call_ms(wall_s, calls, calibration)
    floor = max(0.0, witness - host_ms - slack_ms(calls, calibration)) / TOLERANCE
    return Witness(calls=calls, wall_s=wall_s, per_call_ms=witness, floor_ms=floor, forged=median_ms < floor)


def upper_bound_ok(times_ms: list[float], request_wall_s: float) -> bool:
    """Every reported call ran inside the judge's wall of the timing request."""
    return sum(times_ms) / 1e3 <= request_wall_s


PROFILE_TOLERANCE = 2.0  # the profiled forward (one call, warm L2, its clock as found) against the timed median
PROFILE_SLACK_MS = 0.01


def profile_agrees(median_ms: float, kernel_us: list[float]) -> bool:
    """Whether a profiled forward's device time (Σ of its kernels, from torch.profiler in the
    worker or from Nsight) is consistent with the reported median: the kernels of one forward
    cannot take much longer than the call they make up."""
    device_ms = sum(kernel_us) / 1e3
    return device_ms <= PROFILE_TOLERANCE * median_ms + PROFILE_SLACK_MS


# -- the graph burst: device time the candidate cannot shrink by launching faster ----------------
# On a GPU the worker captures K forwards on K fresh input sets, then the fingerprints of their
# outputs, into one CUDA graph (sandbox.graph_burst). The judge times a replay of that graph and
# its synchronisation with its own clock, the inputs refreshed first from a seed sent with the
# replay. A replay launches no kernel from Python, so the wall per call is the device time of the
# forward (plus a K-th of the fingerprints and of the refresh, which the judge calibrates in its
# own process): no host window is subtracted, and the floor holds on host-bound shapes too.

# The replay's jitter allowance is spread over K calls, so a larger K lets the floor sit closer to the
# device time: at 2 ms and 2 GiB, rms_norm shape 0 (K = 209) kept ~1 µs a call of slack for jitter alone,
# and a third of its time (2.2 µs of 6.7) passed the floor on the H200.
GRAPH_TARGET_S = 4e-3  # K is chosen so that K calls of the reported median take at least this long ...
GRAPH_MAX_CALLS = 1024  # ... up to this many calls,
GRAPH_BUDGET_BYTES = 16 << 30  # ... and no more input sets and outputs than this holds (the fingerprints'
# stacked chunk, sandbox.graph_burst.FINGERPRINT_CHUNK_BYTES, one alive at a time, is under 1 % of it: not counted),
GRAPH_MEMORY_SHARE = 0.125  # ... nor than this share of the GPU's memory. The worker holds up to twice the budget
# (the refreshable inputs' pristine copies) and the judge's refresh calibration as much again. Each replay
# request carries a near-constant overhead the round trip does not capture (~0.3-0.7 ms on the H200, with the
# worker's warm-up): at 4 GiB, 2 GiB input sets (fp8_blockscale_fused_moe's decode shapes) left K = 2, and
# that overhead over 2 calls failed an honest kernel's 0.11 ms median as forged.
GRAPH_REPLAYS = 3  # the fastest of these judges
GRAPH_JITTER_S = 0.2e-3  # a replay request's wall spread (pipe, scheduler) an honest run may still show
# Share of the calibrated fingerprint time allowed as calibration error. On the H200, with one reduction
# per call, honest rms_norm left its witness 12-13 % of what was taken off above its median (shapes 0, 5).
GRAPH_CALIBRATION_SLACK = 0.25

GRAPH, UNCAPTURABLE, HOST = "graph", "uncapturable", "host"  # TimingStats.witness: which witness judged the time


def graph_budget_bytes(device_memory_bytes: int | None) -> int:
    """The bytes of input sets and outputs a graph burst may hold on a GPU of this memory."""
    if not device_memory_bytes:
        return GRAPH_BUDGET_BYTES
    return min(GRAPH_BUDGET_BYTES, int(GRAPH_MEMORY_SHARE * device_memory_bytes))


def graph_calls(median_ms: float, set_bytes: int, budget_bytes: int = GRAPH_BUDGET_BYTES) -> int:
    """K for a graph burst: enough calls of `median_ms` to fill GRAPH_TARGET_S, never fewer
    than a plain burst of that median (`burst_calls`: WITNESS_CALLS, fewer for long calls), never
    more than GRAPH_MAX_CALLS or what `budget_bytes` holds of input sets and outputs (`set_bytes`
    each), and at least 2. The median is the candidate's word, safe to size by (`burst_calls`)."""
    per_call = median_ms if median_ms > 0 else 1e-6  # none a number can read: the longest burst
    wanted = max(burst_calls(median_ms), math.ceil(GRAPH_TARGET_S * 1e3 / per_call))
    return int(max(2, min(wanted, GRAPH_MAX_CALLS, budget_bytes // max(set_bytes, 1))))


@dataclass
class GraphCalibration:
    """What the judge measured in its own process for one graph replay."""

    round_trip_s: float  # an empty request to the worker and back (minimum of a few)
    fingerprints_s: float  # a graph of K output fingerprints of the reference output's size, replayed here
    refresh_s: float = 0.0  # the replay's input refresh on buffers of the same sizes, here (median of a few)
    refresh_spread_s: float = 0.0  # how much slower than their median the slowest of those refreshes was


def graph_slack_ms(calls: int, calibration: GraphCalibration) -> float:
    """The graph floor's allowance per call for request noise and calibration error: the
    jitter, a share of the fingerprints' calibrated time (a graph of the judge's own, not the
    worker's), and the whole spread of the refresh's timings (the worker's own code, timed here
    on buffers of the same sizes: its error is that spread, not a share of its time)."""
    spread = GRAPH_CALIBRATION_SLACK * calibration.fingerprints_s + calibration.refresh_spread_s
    return (GRAPH_JITTER_S + spread) / max(1, calls) * 1e3


def judge_graph(median_ms: float, wall_s: float, calls: int, calibration: GraphCalibration) -> Witness:
    """The witness of one replay of a graph of `calls` forwards timed at `wall_s` by the judge:
    what is left per call once the round trip, the input refresh and the fingerprints are taken
    off is device time, so the floor is (that − slack) / TOLERANCE, with no host window to allow for."""
    rest = wall_s - calibration.round_trip_s - calibration.refresh_s - calibration.fingerprints_s
    witness = max(0.0, rest) / max(1, calls) * 1e3
    slack = graph_slack_ms(calls, calibration)
    floor = max(0.0, witness - slack) / TOLERANCE
    subtracted = (calibration.refresh_s + calibration.fingerprints_s) / max(1, calls) * 1e3
    return Witness(
        calls=calls,
        wall_s=wall_s,
        per_call_ms=witness,
        floor_ms=floor,
        forged=median_ms < floor,
        graph=True,
        subtracted_ms=subtracted,
        slack_ms=slack,
    )


GRAPH_REFRESH_DOMINANCE = 2.0  # taken off per call beyond this many times what the replay left: refresh-dominated


def graph_conclusive(graph: Witness, plain: Witness) -> bool:
    """Whether a graph replay can judge the median. Not when what the judge took off it per call
    (the input refresh and the fingerprints, timed in its own process) outweighs both the plain
    burst's wall per call and GRAPH_REFRESH_DOMINANCE times what the replay itself left per call:
    a forward that reads a small part of large inputs (an MoE decode reads 8 of 128 experts; the
    refresh rewrites all of them) leaves its device time smaller than the error of that
    subtraction, which on the H200 failed an honest kernel. Both tests are needed: the plain
    burst's figure alone can be 0 where the judge's calibration of it exceeded its wall (a 4 µs
    rms_norm shape on the H200), which would send a replay that witnessed plenty to the fallback.
    A candidate cannot make a replay inconclusive: what is taken off depends on the shape's
    inputs, and what is left is its own device time, which it can only lengthen."""
    return graph.subtracted_ms <= plain.per_call_ms or not graph_dominated(graph)


def graph_dominated(graph: Witness) -> bool:
    """Whether what the judge took off a replay per call exceeds GRAPH_REFRESH_DOMINANCE times
    what the replay left: only then can the replay not judge alone, and the plain burst is
    needed (graph_conclusive). A replay that is not dominated judges without it."""
    return graph.subtracted_ms > GRAPH_REFRESH_DOMINANCE * graph.per_call_ms


def inconclusive_clock_ms(graph: Witness, plain: Witness) -> float:
    """The least time of a shape whose replay was inconclusive: the larger of what the two bursts
    allow, the plain burst's wall per call and the replay's own floor. The plain figure can be 0
    (its calibration exceeded its wall); the replay's floor, though unreliable upwards on such a
    shape, still bounds what a forged median may claim."""
    return max(plain.per_call_ms, graph.floor_ms)


def scored_time_ms(median_ms: float, clock_ms: float | None) -> float:
    """The time a shape is scored with: the reported median, never below the judge's own wall per
    call where that is what witnessed it (no graph replay did: TimingStats.clock_ms). A forward
    that escapes the graph, by a host synchronisation or by inputs whose refresh outweighs it,
    cannot report less than the judge's clock saw."""
    return median_ms if clock_ms is None else max(median_ms, clock_ms)
