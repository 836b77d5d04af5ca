"""How long the evaluator takes on the GPU, predicted before a run, so a device budget can be
planned and a run can leave out what will not fit (and say so).

The model follows what `atrex_mcp.evaluate` does per shape (README "Timing"):
  correctness   K seeds in the worker + K reference calls on the trusted side
  timing        2 estimate calls, warm-up and timed calls as `sandbox.timing.plan_calls` picks them,
                fitted to the shape's input sets (`fit_calls_to_sets`, sets from its traffic), a long
                call stopped at the stop's first look (its calls agree within 1 %);
                each timed call also pays an L2 flush, the untimed GPU spin and a device
                synchronisation, and so do the loop's NOOP_CALIBRATION_CALLS no-op calls
  checks        CHECKED_TIMED_SETS reference calls for the timed outputs
  profile       2 calls (one untimed, one under torch.profiler)
plus a cost per shape that grows with its traffic (input generation on both sides, outputs
handed over from the worker to the trusted side and compared, K times: `shape_s` + `byte_s` × the bytes
the operator reads and writes), a fixed cost per evaluation (sandbox worker start, candidate
import) and, for torch.compile, a compile per shape (one static graph per shape), fitted per
operator as a + b × the shape's eager time: where a reference loops in Python, Dynamo unrolls
the loop, so the graph and its compile grow with the shape (attention_forward on the H200:
1.5 s at 0.3 ms eager, 82 s at 1.3 s eager); never more than the evaluator's stage
limit, which every shape from the smallest that ran into it is predicted to reach. On the H200
(`calibrated` over 289 timed shapes) that per-shape cost fitted to 0.46 s + 3.2 s per
GB; per_token_group_quant_fp8 shape 9 (19 GB) spent 76 s there, which a constant per-shape cost
put at 0.3 s.

Per-call times are the eager reference's, measured on the H200 by measurements/run_references.py
(REFERENCE_TIMES); torch.compile is predicted with the eager time, which is an upper bound for most
operators. The three fixed costs start as stated assumptions and are refitted from the
evaluator's own overhead fields once a run exists (`CostModel.calibrated`).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.evaluator import CHECKED_TIMED_SETS, MAX_TIMED_CALLS, MIN_TIMED_CALLS, timing_sets
from atrex_mcp.evaluate.models import EvalResult
from sandbox.timing import NOOP_CALIBRATION_CALLS, fit_calls_to_sets, plan_calls

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_TIMES = ROOT / "measurements" / "results" / "references" / "2026-11-30_h200.json"
BASELINES = ("eager", "torch-compile")


def load_shape_traffic(catalog) -> dict[str, dict[str, float]]:
    """{op: {shape id: bytes read + written}} from the catalog's roofline (bench scripts are trusted)."""
    traffic: dict[str, dict[str, float]] = {}
    for op in catalog.names():
        hidden = catalog.hidden(op)
        for shape in catalog.visible(op).scored_shapes:
            entry = hidden.roofline_entry(shape.id) or {}
            traffic.setdefault(op, {})[shape.id] = float(entry.get("bytes_read", 0) + entry.get("bytes_written", 0))
    return traffic


def load_reference_times(path: Path = REFERENCE_TIMES) -> dict[str, dict[str, float]]:
    """{op: {shape id: eager ms}} for every shape the reference run completed."""
    data = json.loads(Path(path).read_text())
    times: dict[str, dict[str, float]] = {}
    for row in data["shapes"]:
        if row.get("status") == "ok":
            times.setdefault(row["op"], {})[str(row["shape_id"])] = float(row["eager_ms"])
    return times


@dataclass(frozen=True)
class CostModel:
    """Seconds of device-machine wall time the evaluator spends, by part."""

    worker_s: float = 6.0  # sandbox worker start + candidate import, once per evaluate() call
    shape_s: float = 1.0  # per shape, besides the calls: profiler set-up, small transfers
    # per byte the shape's operator reads and writes: inputs generated twice, outputs handed over and compared, K seeds
    # (left at zero: with the output arena the per-byte cost is within the per-shape figure)
    byte_s: float = 0.0
    compile_s: float = 4.0  # per shape, torch.compile only: one static graph per shape
    compile_by_op: Mapping[str, CompileFit] = field(default_factory=dict)  # per operator where measured
    compile_first_s: float = 10.0  # per evaluation, torch.compile only: Inductor's imports and a cold cache
    stage_limit_s: float = (
        120.0  # the evaluator's limit per shape and stage (baselines.py --timeout): no compile costs more
    )
    call_overhead_s: float = 1.5e-4  # per timed or no-op call: flush, synchronisation, event reads, output digest
    spin_s: float = 3e-4  # per timed or no-op call: the GPU spin (TimingStats.spin_us once measured)
    seeds: int = 5
    device_memory_bytes: int = 141 * 10**9  # the H200's; sizes the timing input sets (evaluator.timing_sets)
    source: str = "assumed (no evaluator run on this GPU yet)"
    traffic: Mapping[str, Mapping[str, float]] = field(
        default_factory=dict, repr=False
    )  # {op: {shape: bytes}}: load_shape_traffic()
    eager_ms: Mapping[str, Mapping[str, float]] = field(
        default_factory=dict, repr=False
    )  # {op: {shape: ms}}: load_reference_times()

    def shape_traffic(self, op: str, shape: str) -> float:
        return float(self.traffic.get(op, {}).get(shape, 0.0))

    def compile_seconds(self, op: str, t_ms: float) -> float:
        """torch.compile's first-call cost for a shape of `op` whose eager call takes `t_ms`; at
        most the stage limit, where the evaluator stops the worker, and that limit from the
        smallest shape of the operator that ran into it on."""
        fit = self.compile_by_op.get(op, CompileFit(self.compile_s, 0.0))
        if fit.limit_from_ms is not None and t_ms >= fit.limit_from_ms:
            return self.stage_limit_s
        return min(self.stage_limit_s, max(0.0, fit.a + fit.b * t_ms))

    def calls(self, t_ms: float, set_bytes: float = 0.0) -> tuple[int, int]:
        """(calls of the candidate or reference at full cost, timed calls) for one shape whose
        input set and output hold about `set_bytes` (its traffic), as the evaluator plans them."""
        plan = plan_calls(t_ms, minimum=MIN_TIMED_CALLS, maximum=MAX_TIMED_CALLS)
        sets = timing_sets(int(set_bytes), self.device_memory_bytes)
        timed = fit_calls_to_sets(plan.calls, sets, plan.long)
        if plan.long and timed <= sets:  # long calls spread under 1 % on the H200: the stop's first look ends them
            timed = min(timed, plan.first_check)
        return self.full_calls(plan.warmup, timed), timed

    def full_calls(self, warmup: int, timed: int) -> int:
        """Calls at full cost: K seeds on both sides, 2 estimates, warm-up, timed, the checked sets, the profile."""
        return 2 * self.seeds + 2 + warmup + timed + CHECKED_TIMED_SETS + 2

    def loop_overhead_s(self, timed: int) -> float:
        """What the timing loop adds besides the calls themselves (timed and no-op calibration calls)."""
        return (timed + NOOP_CALIBRATION_CALLS) * (self.call_overhead_s + self.spin_s)

    def shape_seconds(self, t_ms: float, baseline: str, op: str = "", shape: str = "") -> float:
        return sum(self.parts(t_ms, baseline, op, shape).values())

    def evaluation_s(self, baseline: str) -> float:
        """Fixed cost of one evaluate() call."""
        return self.worker_s + (self.compile_first_s if baseline == "torch-compile" else 0.0)

    def parts(self, t_ms: float, baseline: str, op: str = "", shape: str = "") -> dict[str, float]:
        """One shape's predicted seconds by part (the throughput split, predicted); `op` and
        `shape` pick its traffic and its operator's compile cost."""
        full, timed = self.calls(t_ms, self.shape_traffic(op, shape))
        compile_s = self.compile_seconds(op, t_ms) if baseline == "torch-compile" else 0.0
        return {
            "calls": full * t_ms / 1e3,
            "timed_call_overhead": self.loop_overhead_s(timed),
            "per_shape_fixed": self.shape_s,
            "per_shape_traffic": self.byte_s * self.shape_traffic(op, shape),
            "compile": compile_s,
        }

    def calibrated(self, results: Iterable[EvalResult]) -> CostModel:
        """Refit the fixed costs from finished evaluations (their overhead and per-shape seconds);
        with a traffic table, the per-shape cost is fitted as shape_s + byte_s × bytes (least
        squares), and with eager times each operator's compile cost as a + b × eager ms (least
        squares over 3 or more shapes, else their median; shapes whose first call ran into the
        stage limit set where the limit starts). A part with no observation keeps its current
        value."""
        results = list(results)
        per_evaluation, fixed, compiles, first_compiles = [], [], [], []
        by_op: dict[str, list[tuple[float | None, float]]] = {}
        limit_from: dict[str, float] = {}  # per operator, the smallest eager ms whose compile ran into the stage limit
        fixed_bytes: list[float] = []
        spins = [s.timing.spin_us / 1e6 for r in results for s in r.shapes if s.timing and s.timing.spin_us is not None]
        model = replace(self, spin_s=statistics.median(spins)) if spins else self
        for r in results:
            spent_on_shapes = 0.0
            for k, s in enumerate(r.shapes):
                spent = sum(v for k, v in s.seconds.items() if k != "first_call_extra")  # correctness includes it
                spent_on_shapes += spent
                eager = self.eager_ms.get(r.op, {}).get(s.id)
                if (
                    r.candidate == "torch-compile"
                    and s.stage == tx.RUNTIME
                    and s.category == tx.TIMEOUT
                    and eager is not None
                ):
                    limit_from[r.op] = min(eager, limit_from.get(r.op, eager))
                if not s.correct or s.time_ms is None or "timing" not in s.seconds:
                    continue
                compile_s = s.seconds.get("first_call_extra", 0.0) if r.candidate == "torch-compile" else 0.0
                if r.candidate == "torch-compile":
                    (first_compiles if k == 0 else compiles).append(compile_s)
                    by_op.setdefault(r.op, []).append((eager, compile_s))
                full, timed = (
                    (model.full_calls(s.timing.warmup_calls, s.timing.calls), s.timing.calls)
                    if s.timing
                    else model.calls(s.time_ms, model.shape_traffic(r.op, s.id))
                )
                fixed.append(spent - compile_s - full * s.time_ms / 1e3 - model.loop_overhead_s(timed))
                fixed_bytes.append(model.shape_traffic(r.op, s.id))
            if r.overhead.total_s > 0 and r.candidate != "torch-compile" and r.partial is None:
                per_evaluation.append(max(0.0, r.overhead.total_s - spent_on_shapes))
        shape_s, byte_s = (max(0.0, statistics.median(fixed)), 0.0) if fixed else (self.shape_s, self.byte_s)
        if self.traffic and len(set(fixed_bytes)) > 1:
            byte_s, shape_s = statistics.linear_regression(fixed_bytes, fixed)
            byte_s, shape_s = max(0.0, byte_s), max(0.0, shape_s)
        compile_s = statistics.median(compiles) if compiles else self.compile_s
        return replace(
            model,
            worker_s=statistics.median(per_evaluation) if per_evaluation else self.worker_s,
            shape_s=shape_s,
            byte_s=byte_s,
            compile_s=compile_s,
            compile_by_op={
                **self.compile_by_op,
                **{
                    op: _compile_fit(by_op.get(op, []), limit_from.get(op), compile_s, self.stage_limit_s)
                    for op in by_op.keys() | limit_from.keys()
                },
            },
            compile_first_s=(
                max(0.0, statistics.median(first_compiles) - statistics.median(compiles))
                if first_compiles and compiles
                else self.compile_first_s
            ),
            source=f"calibrated from {len(results)} evaluations ({len(per_evaluation)} worker starts, {len(fixed)} "
            f"timed shapes, {len(compiles)} torch.compile first calls)",
        )

    def describe(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k not in ("traffic", "eager_ms")}


class CompileFit(NamedTuple):
    """An operator's torch.compile first-call cost: a + b × eager ms seconds, and the stage limit
    for shapes from `limit_from_ms` eager ms on (one that size ran into it)."""

    a: float
    b: float
    limit_from_ms: float | None = None


def _compile_fit(
    observations: list[tuple[float | None, float]], limit_from_ms: float | None, default_s: float, limit_s: float
) -> CompileFit:
    """Least squares over the observations with an eager time when there are 3 or more and the
    slope comes out positive. Else, where a shape ran into the stage limit (`limit_s`, from
    `limit_from_ms` eager ms on), the line from the largest shape that compiled to that one:
    c12 gave gated_delta_rule_update's T = 128-258 shapes 5-6 s by the one T = 1 shape (4.3 s)
    and T = 258 ran past 120 s. Else their median (`default_s`, the fitted all-operator median,
    with none: an operator seen only running into the limit)."""
    known = [(t, c) for t, c in observations if t is not None]
    if len(known) >= 3 and len({t for t, _ in known}) > 1:
        slope, intercept = statistics.linear_regression([t for t, _ in known], [c for _, c in known])
        if slope > 0:
            return CompileFit(intercept, slope, limit_from_ms)
    if known and limit_from_ms is not None:
        t0, c0 = max(known)
        if limit_from_ms > t0 and limit_s > c0:
            slope = (limit_s - c0) / (limit_from_ms - t0)
            return CompileFit(c0 - slope * t0, slope, limit_from_ms)
    return CompileFit(statistics.median(c for _, c in observations) if observations else default_s, 0.0, limit_from_ms)


@dataclass(frozen=True)
class Job:
    """One shape to evaluate, with its predicted cost (worker start excluded)."""

    op: str
    shape: str
    seconds: float


def jobs_for(
    selection: Mapping[str, list[str]],
    times: Mapping[str, Mapping[str, float]],
    model: CostModel,
    baseline: str,
    default_ms: float = 1.0,
) -> list[Job]:
    """Jobs for {op: [shape ids]}; a shape without a reference time is predicted at `default_ms`."""
    return [
        Job(op, sid, model.shape_seconds(times.get(op, {}).get(sid, default_ms), baseline, op, sid))
        for op, ids in selection.items()
        for sid in ids
    ]


def predicted_seconds(jobs: Iterable[Job], model: CostModel, baseline: str) -> float:
    """One evaluation per operator, one after another."""
    jobs = list(jobs)
    return len({j.op for j in jobs}) * model.evaluation_s(baseline) + sum(j.seconds for j in jobs)


def representative_order(
    times: Mapping[str, Mapping[str, float]],
    weights: Mapping[str, float],
    large_shapes: int = 3,
    large_range_ms: tuple[float, float] = (1.0, 20.0),
) -> list[tuple[str, str]]:
    """Shapes in the order they are worth measuring when the budget is short: every operator's
    fastest shape (operators by weight), then every operator's median shape, then a few large
    shapes (one per operator, the heaviest operators first, eager time within `large_range_ms`)."""
    ops = sorted(times, key=lambda op: (-weights.get(op, 0.0), op))
    ranked = {op: sorted(times[op], key=lambda sid: times[op][sid]) for op in ops}
    order: list[tuple[str, str]] = [(op, ranked[op][0]) for op in ops if ranked[op]]
    order += [(op, ranked[op][len(ranked[op]) // 2]) for op in ops if len(ranked[op]) > 1]
    lo, hi = large_range_ms
    large = []
    for op in ops:
        inside = [sid for sid in ranked[op] if lo <= times[op][sid] <= hi and (op, sid) not in order]
        if inside:
            large.append((op, inside[-1]))
    return order + large[:large_shapes]


def spread_order(
    times: Mapping[str, Mapping[str, float]], weights: Mapping[str, float], per_op: int
) -> list[tuple[str, str]]:
    """Up to `per_op` shapes of every operator, evenly spaced over its shapes ranked by eager
    time (the ranks at quantiles (i + ½)/per_op), for estimating each operator's median S when
    its full set does not fit. Ordered median first, then outward in pairs, every operator's
    k-th pick (operators by weight) before any (k+1)-th, so a budget that cuts the list keeps
    every operator's most central shapes."""
    ops = sorted(times, key=lambda op: (-weights.get(op, 0.0), op))
    picks: dict[str, list[str]] = {}
    for op in ops:
        ranked = sorted(times[op], key=lambda sid: times[op][sid])
        k = min(per_op, len(ranked))
        central_first = sorted(range(k), key=lambda i: (abs(i - (k - 1) / 2), i))
        picks[op] = [ranked[int((i + 0.5) * len(ranked) / k)] for i in central_first]
    depth = max((len(v) for v in picks.values()), default=0)
    return [(op, picks[op][j]) for j in range(depth) for op in ops if j < len(picks[op])]


def fit_to_budget(
    order: Iterable[tuple[str, str]],
    times: Mapping[str, Mapping[str, float]],
    model: CostModel,
    baseline: str,
    budget_s: float,
) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """Walk `order`, keeping each shape whose cost (plus a worker start for an operator not yet
    kept) still fits; returns ({op: kept ids}, shapes left out)."""
    kept: dict[str, list[str]] = {}
    left: list[tuple[str, str]] = []
    spent = 0.0
    for op, sid in order:
        cost = model.shape_seconds(times[op][sid], baseline, op, sid) + (
            0.0 if op in kept else model.evaluation_s(baseline)
        )
        if spent + cost <= budget_s:
            kept.setdefault(op, []).append(sid)
            spent += cost
        else:
            left.append((op, sid))
    return kept, left
