"""The judge's graph burst on a GPU (trusted side; the figures are timing_witness's).

The worker captures K forwards on K fresh input sets into one CUDA graph (sandbox.graph_burst),
untimed; the judge then times GRAPH_REPLAYS replays of it, each a request of its own, with its
own clock. Each replay request carries a refresh seed drawn here after the capture: inside the
timed window the worker first perturbs every floating-point input of every set from that seed
(`StackedInputs.refresh`), so no output can be computed before the window opens. Each replay that
is the fastest so far has one output, chosen after it ran, fetched and compared with the
reference on that set's refreshed inputs (rebuilt here, `refreshed_set`) and with the fingerprint
that replay's reply committed to. The fastest replay's wall, less a round trip, the refresh (the
same refresh of buffers of the same sizes, timed here) and the fingerprints' device time (a graph
of the same fingerprints replayed in this process), is the device time of K forwards.
"""

from __future__ import annotations

import secrets
import statistics
import time
from typing import Any

import torch

from atrex_mcp.evaluate import timing_witness
from atrex_mcp.evaluate.session import Failure, Session, fastest_ping
from sandbox import gpu_cache
from sandbox.graph_burst import (
    StackedInputs,
    empty_prints,
    fingerprint,
    fingerprints_into,
    refreshable,
    refreshed_set,
)
from sandbox.handoff import output_tensors
from sandbox.messages import GraphCaptureRequest, GraphReplayRequest, Request, WarmRequest

CALIBRATION_REPLAYS = 3
CALIBRATION_COPY_BYTES = 256 << 20  # distinct outputs the fingerprints' calibration reads: > L2
REFRESH_CALIBRATIONS = 7  # refreshes timed here, after one untimed: their median is taken off the wall


def fingerprints_s(output: Any, calls: int) -> float:
    """Device time of the fingerprints of `calls` outputs like `output`, as the worker's graph
    computes them after its K forwards (`fingerprints_into`: the same chunks, the same launches),
    in one graph replayed here (the fastest of CALIBRATION_REPLAYS, timed with CUDA events in this
    process). Should the capture fail here, the same computation launched eagerly: longer, so the
    floor only gets lower."""
    outputs = calibration_outputs(output, calls)
    stream = torch.cuda.current_stream()
    try:
        return _graph_fingerprints_s(outputs)
    except RuntimeError:
        torch.cuda.set_stream(stream)  # a failed capture_end leaves the capture's stream current
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fingerprints_into(outputs, empty_prints(calls, len(output_tensors(output)), "cuda"))
        torch.cuda.synchronize()
        return time.perf_counter() - t0


def calibration_outputs(output: Any, calls: int, copy_bytes: int = CALIBRATION_COPY_BYTES) -> list[list[Any]]:
    """`calls` outputs of `output`'s tensors for the calibration: distinct copies, cycled once
    they hold `copy_bytes`. The worker's K outputs are distinct, and read after all K forwards
    they are mostly out of L2 where they outgrow it; copies cycled over more than L2 are too,
    and a chunk (FINGERPRINT_CHUNK_BYTES) never holds one copy twice."""
    tensors = output_tensors(output)
    size = max(1, sum(t.numel() * t.element_size() for t in tensors))
    copies = [[t.clone() for t in tensors] for _ in range(min(calls, max(1, -(-copy_bytes // size))))]
    return [copies[i % len(copies)] for i in range(calls)]


def _graph_fingerprints_s(outputs: list[list[Any]]) -> float:
    prints = empty_prints(len(outputs), len(outputs[0]), "cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fingerprints_into(outputs, prints)  # once before the capture, as torch asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with gpu_cache.graph_capture(graph, capture_error_mode="thread_local"):  # other threads may use the GPU
        fingerprints_into(outputs, prints)
    best = float("inf")
    for _ in range(CALIBRATION_REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    graph.reset()
    return best


def refresh_s(inputs: dict[str, Any], calls: int) -> tuple[float, float]:
    """(median, spread) of REFRESH_CALIBRATIONS refreshes, timed on this process's clock from
    one synchronisation to the next, of K = `calls` sets of buffers shaped like `inputs`' refreshable
    tensors: the refresh the worker does inside the replay's window, launches included. One
    refresh runs untimed first (the refresh kernel's compilation). The spread is how much
    slower than the median the upper quartile was: a worker refresh that slow leaves the witness
    that much too high, the direction that could fail an honest kernel. Not the slowest one: a
    single host hiccup among the seven would widen the slack by all of it, and the fastest of the
    judge's replays is the least likely to have met one."""
    live = [torch.ones(calls * t.numel(), dtype=t.dtype, device=t.device) for t in inputs.values() if refreshable(t)]
    stacked = StackedInputs(sets=[], live=live, base=[b.clone() for b in live])
    sync = torch.cuda.synchronize if any(b.is_cuda for b in live) else (lambda: None)
    stacked.refresh(secrets.randbelow(2**31 - 1))
    walls = []
    for _ in range(REFRESH_CALIBRATIONS):
        sync()
        t0 = time.perf_counter()
        stacked.refresh(secrets.randbelow(2**31 - 1))
        sync()
        walls.append(time.perf_counter() - t0)
    median = statistics.median(walls)
    return median, statistics.quantiles(walls, n=4)[2] - median


def round_trip_s(session: Session, timeout_s: float) -> float | Failure:
    """The fastest of three empty requests to the worker and back, never more than the fastest
    this worker answered before the candidate was imported (`Session.trusted_round_trip_s`): the
    round trip is taken off the bursts' walls, so a candidate that delayed its pings would
    otherwise shrink its own witness by the delay."""
    trip = fastest_ping(session, timeout_s)
    trusted = session.trusted_round_trip_s
    return trip if isinstance(trip, Failure) or trusted is None else min(trip, trusted)


def timed_call(session: Session, request: Request, timeout_s: float, warm: bool = True) -> tuple[Any, float]:
    """(reply or Failure, wall) of `request` on this process's clock, from its send to its
    reply. With `warm` (a GPU), an untimed `warm` request goes first (timing_witness.WARMUP_S):
    the timed window then does not also time the GPU switching to the worker's work; its
    Failure, if any, comes back with a wall of 0."""
    if warm:
        warmed = session.call(WarmRequest(seconds=timing_witness.WARMUP_S), timeout_s)
        if isinstance(warmed, Failure):
            return warmed, 0.0
    t0 = time.perf_counter()
    reply = session.call(request, timeout_s)
    return reply, time.perf_counter() - t0


def run(
    trial: Any, session: Session, shape: Any, result: Any, median_ms: float, set_bytes: int
) -> timing_witness.Witness | str | Failure | None:
    """The graph burst's verdict on `median_ms`: a Witness; the reason the forward could not be
    captured (str); the worker's Failure; or None once a check here has failed the shape (the
    result says how). `trial` is the evaluation (its request, payloads, fetch_checked)."""
    timeout = trial.request.timeout_s
    budget = timing_witness.graph_budget_bytes(trial.device_info.memory_bytes)
    calls = timing_witness.graph_calls(median_ms, set_bytes, budget)  # + the refresh's pristine inputs: as much again
    seeds = [secrets.randbelow(2**31 - 1) for _ in range(calls)]  # not in the result's seeds: up to 1,024 a shape
    reply = session.call(GraphCaptureRequest(shape=trial.payload_shape(shape), seeds=seeds), timeout)
    if isinstance(reply, Failure):
        return reply
    if reply.get("captured") is not True:
        return str(reply.get("reason") or "the worker gave no reason")[:300]
    walls: list[float] = []
    checked = None
    for _ in range(timing_witness.GRAPH_REPLAYS):
        refresh_seed = secrets.randbelow(2**31 - 1)  # drawn now: the replay's inputs exist only from here on
        reply, wall = timed_call(session, GraphReplayRequest(seed=refresh_seed), timeout)
        if isinstance(reply, Failure):
            return reply
        if not walls or wall < min(walls):  # only the fastest replay witnesses: only it needs checking
            checked = check_replay(trial, session, shape, result, seeds, refresh_seed, reply.get("digests"))
            if checked is None:
                return None
        walls.append(wall)
    trip = round_trip_s(session, timeout)
    if isinstance(trip, Failure):
        return trip
    refresh, spread = refresh_s(trial.inputs(shape, seeds[0]), calls)
    calibration = timing_witness.GraphCalibration(
        round_trip_s=trip, fingerprints_s=fingerprints_s(checked, calls), refresh_s=refresh, refresh_spread_s=spread
    )
    return timing_witness.judge_graph(median_ms, min(walls), calls, calibration)


def check_replay(
    trial: Any, session: Session, shape: Any, result: Any, seeds: list[int], refresh_seed: int, digests: Any
) -> Any:
    """One output of the replay just timed, chosen now, against the reference on that set's
    inputs as the replay's refresh left them, and against the fingerprint the replay's reply
    committed to: the candidate's output, or None (shape failed)."""
    if not isinstance(digests, list) or len(digests) != len(seeds):
        trial._timed_mismatch(result, "The worker did not return a fingerprint for every call of the graph burst.", [])
        return None
    chosen = secrets.randbelow(len(seeds))
    what = f"a graph-burst call (set {chosen})"
    inputs = refreshed_set(trial.inputs(shape, seeds[chosen]), chosen, len(seeds), refresh_seed)
    candidate = trial.fetch_checked(
        session, shape, result, seeds[chosen], chosen, False, what, graph=True, inputs=inputs
    )
    if candidate is None:
        return None
    if fingerprint(candidate).tolist() != digests[chosen]:
        trial._timed_mismatch(
            result, f"Output of {what} is wrong: its fingerprint is not the one the replay reported.", []
        )
        return None
    return candidate
