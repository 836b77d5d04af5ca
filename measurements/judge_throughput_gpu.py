"""How long the judge takes per shape on one GPU, and where the time goes: the wiki's kernels of a
few operators (or their eager references) judged on all their shapes through `atrex-mcp bench
eval`'s local path (a bench run made from the candidate set, `evaluation.evaluate_run`: one
evaluation after another, each worker spawned ahead by the standby).

    python3 measurements/judge_throughput_gpu.py --ops l2_norm,moe_align_block_size,paged_attention_decode \\
        --seeds 5 --out DIR [--set wiki|eager] [--warm-profiler on|off] [--budget-s 115] [--probe-s 10]
        [--overlap on|off]
    python3 measurements/judge_throughput_gpu.py --ops all --run-dir RUN --budget-s 480 --probe-s 0 --out DIR
        (the whole set over several calls: each call continues the run kept in RUN)

Writes DIR/<date>_<gpu>.{json,md} and prints one summary line. Per operator and in all:

* seconds per shape including worker start (each evaluation's own wall over its judged shapes;
  in all, the sum of those walls, so a run continued over calls adds up to one set's judging
  time, and the runner's few seconds between evaluations are left out), and a projection to
  the 440 shapes of the full set;
* the evaluator's own split (`measurements.baselines.throughput_split`) and the mean of each
  part of `ShapeResult.seconds` per shape (correctness, first_call_extra, reference_and_compare,
  timing, timed_output_checks, witness, profile);
* where the judge waited on the worker, by request type (run, time, burst, graph_capture,
  graph_replay, fetch, keep, ping, profile: count and seconds), and what it spent itself in
  a few functions (input sets, reference outputs, comparisons, input checksums, digests, cache
  releases, the graph witness's refresh and fingerprint calibrations, the hand-over of the
  candidate's outputs out of the arena, output copies, the pinned-cache check, the poisoned
  copies of timed outputs: on the H200 the first 208 shapes of the wiki set left 57 s of 447
  outside every figure, most on the operators with large outputs). GPU work is
  asynchronous, so a function's seconds hold the device work of whatever it waited for, except
  reference_output's: the meter synchronises before and after it, so its seconds are the
  reference's own device work too (otherwise the next synchronisation holds them: a cache
  release, a comparison, or the worker's run);
* the correctness stage's overlap (evaluator.Trial.correctness): a `run` during which the judge
  made the next seed's reference counts only the judge's wait after that work; that work is
  `reference_ahead`, and `reference_ahead_hidden` is the part of it the worker's run covered,
  what the overlap saved against the strict order (`--overlap off` judges in that order, for
  the same figures without it);
* the GPU's memory at its fullest, per operator: a thread samples the device's used memory
  (`torch.cuda.mem_get_info`, both processes and the spare's context) and the judge's own
  reserved memory every MEMORY_SAMPLE_S, under the label of the request or function in progress
  (the innermost metered one; "between" outside them); the report gives, per operator, the label
  at the highest sample with both figures, so a shape that brings the GPU near full says which
  step did;
* the witness that judged each timed shape (graph, uncapturable, or a graph replay
  inconclusive and scored at the judge's wall), verdicts by category, and the profile seconds of
  each evaluation's first profiled shape against the others' median (the profiler's first-use
  set-up, which `--warm-profiler on` moves into the worker spawned ahead);
* with `--warm-profiler on`, a probe of what spares warming their profilers do to a timing
  running beside them: a 64 MiB device copy timed with CUDA events after a spin, as the timing
  loop times a call, for `--probe-s` seconds alone and `--probe-s` seconds from the moment a
  standby of the series' depth is filled (its spares spawn at once, as at a series' first
  refill; each imports torch, ~4 s, then warms, ~4.5 s on the H200): median, p90 and the
  slowest half-second bin's median of both windows.

The series keeps `standby_depth` spares ahead (evaluate.standby.DEFAULT_DEPTH; the report's
header line says how many).

No per-shape time or S is written (with T_SOL hidden, the pair would give it away). Each
evaluation gets what is left of `--budget-s` as its deadline, so the script ends in time (an
evaluation cut short is reported partial, and with `--run-dir` judged again in full by the next
call; once less than MIN_EVALUATION_S is left, the evaluations still to come do not start and are
recorded as failed with budget_spent, which a next call with `--run-dir` judges). Without a GPU
(TRITON_INTERPRET=1) it runs the same path on CPU as a dry run: nothing is timed and there is no probe.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from measurements.bench_env import interpret_without_gpu  # noqa: E402

GPU = interpret_without_gpu()

import atrex_mcp.evaluate as evaluate_package  # noqa: E402
from atrex_mcp.agentbench.evaluation import EvalSettings, evaluate_run  # noqa: E402
from atrex_mcp.evaluate import EvalRequest, Standby, evaluator, graph_witness, session, transfer  # noqa: E402
from atrex_mcp.evaluate.models import EvalResult  # noqa: E402
from atrex_mcp.evaluate.standby import DEFAULT_DEPTH  # noqa: E402
from atrex_mcp.problemset.catalog import Catalog  # noqa: E402
from measurements.baselines import throughput_split  # noqa: E402
from measurements.cluster_runs import (  # noqa: E402
    CPU_GPU,
    MIN_EVALUATION_S,
    candidate_set,
    host_record,
    make_run,
    report_head,
    report_stem,
    table,
    within_budget,
)

FULL_SET_SHAPES = 440
PROBE_BYTES = 64 << 20
PROBE_SPIN_CYCLES = 600_000  # ~300 µs at the H200's clock, the timing loop's least spin
PROBE_BIN_S = 0.5
PROBE_SETTLE_S = 2.0
DEFAULT_OPS = "l2_norm,moe_align_block_size,paged_attention_decode"
JUDGE_FUNCTIONS = {  # (module or class, attribute): what the judge does itself, apart from waiting on the worker
    "inputs": (evaluator.Trial, "inputs"),
    "reference_output": (evaluator.Trial, "reference_output"),
    "compare_outputs": (evaluator, "compare_outputs"),
    "input_checksums": (evaluator, "input_checksums"),
    "digest": (evaluator, "digest"),
    "release_cached_gpu_memory": (evaluator, "_release_cached_gpu_memory"),
    "graph_refresh_calibration": (graph_witness, "refresh_s"),
    "graph_fingerprint_calibration": (graph_witness, "fingerprints_s"),
    "output_hand_over": (transfer.OutputArena, "load"),  # the candidate's output copied out of the arena
    "copy_structure": (evaluator, "_copy_structure"),  # outputs copied (a pinned reference moved through host)
    "cache_pins_memory": (evaluator, "_cache_pins_memory"),
    "poison": (evaluator, "poison"),
}

MEMORY_SAMPLE_S = 0.05  # the memory watch's sampling period
GIB = 1 << 30
SYNCED_FUNCTIONS = {"reference_output"}  # timed between device synchronisations (see the module docstring)


def _synchronize() -> None:
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


METER_FILE = "throughput_meter.json"  # beside the run in --run-dir: the meter's tables of every call so far


class Meter:
    """Seconds and counts per operator: requests to the worker by type, and the judge's own
    functions, accumulated by wrappers installed around them for the run."""

    def __init__(self) -> None:
        self.op = "?"
        self.requests: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.functions: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.labels: list[str] = []  # the metered requests and functions in progress, innermost last
        # per operator: the highest sample of the device's used memory (bytes), its label, the judge's reserved memory
        self.memory: dict[str, dict[str, Any]] = {}

    @property
    def label(self) -> str:
        return self.labels[-1] if self.labels else "between"

    def sample_memory(self, used_bytes: int, judge_bytes: int, total_bytes: int) -> None:
        """One sample of the memory watch, kept where it is the operator's highest so far."""
        best = self.memory.get(self.op)
        if best is None or used_bytes > best["used"]:
            self.memory[self.op] = {
                "label": self.label, "used": used_bytes, "judge_reserved": judge_bytes, "total": total_bytes
            }  # fmt: skip

    @contextlib.contextmanager
    def watching_memory(self, period_s: float = MEMORY_SAMPLE_S) -> Iterator[None]:
        """The memory watch's thread, on a GPU only, for the duration of the block."""
        if not GPU:
            yield
            return
        import threading

        import torch

        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(period_s):
                free, total = torch.cuda.mem_get_info()
                self.sample_memory(total - free, torch.cuda.memory_reserved(), total)

        thread = threading.Thread(target=watch, name="memory-watch", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _timed(self, table_: dict[str, dict[str, float]], name: str, fn: Any, synced: bool = False) -> Any:
        """`fn` wrapped to add its seconds and calls to `table_`; `synced`: between device
        synchronisations, so its seconds include its own device work."""
        sync = _synchronize if synced else (lambda: None)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            sync()
            self.labels.append(name)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                sync()
                table_[self.op][name + " s"] += time.perf_counter() - t0
                table_[self.op][name + " n"] += 1
                self.labels.pop()

        return wrapper

    def _overlapped_call(
        self, call: Any, kind: str, this: Any, request: Any, meanwhile: Any, *args: Any, **kwargs: Any
    ) -> Any:
        """A call during which the judge made the next seed's reference (Session.call's
        `meanwhile`): the request's row gets only the judge's wait after that work; `reference_ahead`
        gets the work, and `reference_ahead_hidden` the part of it the worker's run covered (the
        worker's wall on the call, at most the work's): what the overlap saved."""
        spent: list[float] = []

        def timed_meanwhile() -> Any:
            t0 = time.perf_counter()
            self.labels.append("reference_ahead")
            try:
                return meanwhile()
            finally:
                self.labels.pop()
                spent.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        self.labels.append(kind)
        try:
            return call(this, request, *args, meanwhile=timed_meanwhile, **kwargs)
        finally:
            self.labels.pop()
            ahead = sum(spent)
            self.requests[self.op][kind + " s"] += time.perf_counter() - t0 - ahead
            self.requests[self.op][kind + " n"] += 1
            self.functions[self.op]["reference_ahead s"] += ahead
            self.functions[self.op]["reference_ahead n"] += 1
            self.functions[self.op]["reference_ahead_hidden s"] += min(ahead, this.last_call_s)
            self.functions[self.op]["reference_ahead_hidden n"] += 1

    @contextlib.contextmanager
    def installed(self, deadline: float) -> Iterator[None]:
        """The wrappers in place around the run, and the originals back after it: the script
        also runs inside a test process, whose later evaluations must not inherit them (nor the
        deadline they give every evaluation)."""
        targets = [(session.Session, "call"), (evaluate_package, "evaluate"), *JUDGE_FUNCTIONS.values()]
        saved = [(owner, attribute, getattr(owner, attribute)) for owner, attribute in targets]
        call = session.Session.call

        def timed_call(this: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            kind = str(getattr(request, "command", type(request).__name__))
            meanwhile = kwargs.pop("meanwhile", None)
            if meanwhile is None:
                return self._timed(self.requests, kind, call)(this, request, *args, **kwargs)
            return self._overlapped_call(call, kind, this, request, meanwhile, *args, **kwargs)

        session.Session.call = timed_call  # type: ignore[method-assign,assignment]
        for name, (owner, attribute) in JUDGE_FUNCTIONS.items():
            synced = name in SYNCED_FUNCTIONS
            setattr(owner, attribute, self._timed(self.functions, name, getattr(owner, attribute), synced))
        run_one = evaluate_package.evaluate

        def evaluate(request: EvalRequest, *args: Any, **kwargs: Any) -> EvalResult:
            self.op = request.op
            hint = "run the script again with the same --run-dir to judge it"  # bench eval records no result
            return run_one(within_budget(request, deadline, hint, MIN_EVALUATION_S), *args, **kwargs)

        evaluate_package.evaluate = evaluate  # bench eval's local path imports it when it runs
        try:
            yield
        finally:
            for owner, attribute, original in saved:
                setattr(owner, attribute, original)

    def merge_into(self, path: Path) -> None:
        """Add this call's tables to those of earlier calls kept at `path` (a run continued over
        several calls): an operator judged again replaces its earlier figures."""
        stored = json.loads(path.read_text()) if path.is_file() else {"requests": {}, "functions": {}}
        for name, table_ in (("requests", self.requests), ("functions", self.functions)):
            stored[name].update({op: dict(counts) for op, counts in table_.items()})
        stored.setdefault("memory", {}).update(self.memory)
        path.write_text(json.dumps(stored, indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Meter:
        """The tables `merge_into` kept."""
        meter = cls()
        stored = json.loads(path.read_text())
        for name, table_ in (("requests", meter.requests), ("functions", meter.functions)):
            for op, counts in stored[name].items():
                table_[op].update(counts)
        meter.memory.update(stored.get("memory", {}))
        return meter

    def per_op(self, op: str) -> dict[str, Any]:
        def rows(counter: dict[str, float]) -> dict[str, dict[str, float]]:
            names = sorted({key.rsplit(" ", 1)[0] for key in counter})
            return {n: {"n": int(counter[n + " n"]), "s": round(counter[n + " s"], 3)} for n in names}

        found = {"requests": rows(self.requests[op]), "judge_functions": rows(self.functions[op])}
        if op in self.memory:
            m = self.memory[op]
            found["gpu_memory_highest"] = {
                "label": m["label"],
                **{f"{key}_gib": round(m[key] / GIB, 2) for key in ("used", "judge_reserved", "total")},
            }
        return found


def probe(catalog: Catalog, op: str, seconds: float) -> dict[str, Any]:
    """A 64 MiB device copy timed like a timed call, alone, then while a standby of the series'
    depth fills (its spares spawn at once and warm their profilers, as at a series' first refill):
    what the warm-up does to a timing running beside it."""
    import torch

    x = torch.empty(PROBE_BYTES, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)

    def window(seconds: float) -> list[tuple[float, float]]:
        samples, t0 = [], time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(PROBE_SPIN_CYCLES)
            start.record()
            y.copy_(x)
            end.record()
            end.synchronize()
            samples.append((time.perf_counter() - t0, start.elapsed_time(end) * 1e3))
        return samples

    def summary(samples: list[tuple[float, float]]) -> dict[str, float]:
        us = sorted(u for _, u in samples)
        bins: dict[int, list[float]] = defaultdict(list)
        for t, u in samples:
            bins[int(t / PROBE_BIN_S)].append(u)
        worst = max(statistics.median(b) for b in bins.values())
        return {
            "calls": len(us),
            "median_us": round(statistics.median(us), 3),
            "p90_us": round(us[int(0.9 * (len(us) - 1))], 3),
            "slowest_bin_median_us": round(worst, 3),
        }

    window(PROBE_SETTLE_S)  # clocks up, allocator warm
    quiet = window(seconds)
    spec = evaluator.Trial(EvalRequest(op=op, baseline="eager"), catalog, None, None).launch_spec(Path("."))
    with Standby(warm_profiler=True) as standby:
        t0 = time.perf_counter()
        standby.refill(spec)
        beside = window(seconds)
        spawned_s = time.perf_counter() - t0
        alive = sum(spare.worker.alive for spare in standby.waiting())
    return {
        "kernel": f"copy of {PROBE_BYTES >> 20} MiB after a {PROBE_SPIN_CYCLES}-cycle spin",
        "window_s": seconds,
        "spares": standby.depth,
        "alone": summary(quiet),
        "beside_warming_spares": summary(beside),
        "spares_alive_after_window": alive,
        "spare_window_s": round(spawned_s, 2),
    }


def shape_parts(results: list[EvalResult]) -> dict[str, float]:
    """Mean seconds per judged shape of each part of ShapeResult.seconds."""
    judged = [s for r in results for s in r.shapes if s.judged]
    totals: Counter = Counter()
    for s in judged:
        totals.update(s.seconds)
    return {k: round(v / max(1, len(judged)), 4) for k, v in sorted(totals.items())}


def witnesses(results: list[EvalResult]) -> dict[str, int]:
    """How each timed shape was witnessed (a graph replay, or the judge's wall where none did)."""
    kinds: Counter = Counter()
    for r in results:
        for s in r.shapes:
            if s.timing is None:
                continue
            kind = s.timing.witness or "none"
            if kind == "graph" and s.timing.clock_ms is not None:
                kind = "graph inconclusive: scored at the judge's wall"
            kinds[kind] += 1
    return dict(kinds)


def first_profile(result: EvalResult) -> dict[str, float | None]:
    """The profile seconds of the first profiled shape against the median of the others."""
    profiled = [s.seconds["profile"] for s in result.shapes if "profile" in s.seconds]
    if not profiled:
        return {"first_s": None, "others_median_s": None}
    rest = profiled[1:]
    return {"first_s": round(profiled[0], 3), "others_median_s": round(statistics.median(rest), 4) if rest else None}


def report(
    args: argparse.Namespace, results: list[EvalResult], meter: Meter, call_wall: float, stored: Meter | None = None
) -> dict[str, Any]:
    """Per operator and in all. `wall_s` is the sum of the evaluations' own walls (each
    operator's EvalResult.overhead.total_s, worker starts included), so a run continued over
    several calls adds up to one set's judging time; `call_wall_s` is this call's."""
    meter = stored or meter
    cut_short = [r.op for r in results if r.partial is not None]  # left out of the sums, judged again next call
    results = [r for r in results if r.partial is None] or results
    ops = {}
    for r in results:
        judged = sum(s.judged for s in r.shapes)
        ops[r.op] = {
            "shapes": len(r.shapes),
            "judged": judged,
            "partial": r.partial,
            "wall_s": round(r.overhead.total_s, 2),
            "s_per_shape": round(r.overhead.total_s / max(1, judged), 3),
            "worker_start_s": round(r.overhead.worker_start_s, 2),
            "spawned_ahead_s": round(r.overhead.spawned_ahead_s, 2),
            "candidate_load_s": round(r.overhead.candidate_load_s, 2),
            "restarts": r.overhead.restarts,
            "split": throughput_split([r]),
            "parts_per_shape_s": shape_parts([r]),
            "profile": first_profile(r),
            "witness": witnesses([r]),
            "verdicts": dict(Counter("correct" if s.correct else f"{s.stage}/{s.category}" for s in r.shapes)),
            **meter.per_op(r.op),
        }
    judged = sum(o["judged"] for o in ops.values())
    wall = sum(r.overhead.total_s for r in results)
    per_shape = wall / max(1, judged)
    return {
        "set": args.set,
        "ops": ops,
        "seeds": args.seeds,
        "warm_profiler": args.warm_profiler == "on",
        "standby_depth": DEFAULT_DEPTH,
        "shapes_judged": judged,
        "wall_s": round(wall, 2),
        "call_wall_s": round(call_wall, 2),
        "cut_short": cut_short,
        "s_per_shape": round(per_shape, 3),
        "full_set_projection_min": round(per_shape * FULL_SET_SHAPES / 60, 1),
        "split": throughput_split(results),
        "parts_per_shape_s": shape_parts(results),
        "witness": witnesses(results),
    }


def markdown(found: dict[str, Any]) -> str:
    ahead = overlap_totals(found)
    lines = report_head(f"Judge throughput on one GPU: the {found['set']} kernels, {found['seeds']} seeds", found)
    lines += [
        f"{found['shapes_judged']} shapes judged in {found['wall_s']} s of evaluation (this call's wall: "
        f"{found['call_wall_s']} s): **{found['s_per_shape']} s a shape** "
        f"(worker starts included); the full set of {FULL_SET_SHAPES} at this rate: "
        f"{found['full_set_projection_min']} min. Profiler warmed in the spares: {found['warm_profiler']}; "
        f"spares kept ahead (standby depth): {found.get('standby_depth', 1)}.",
        "",
        *([f"Cut short (judged again by a next call with --run-dir): {', '.join(found['cut_short'])}.", ""]
          if found.get("cut_short") else []),
        *([f"Not started, the budget spent: {', '.join(found['not_started'])}.", ""]
          if found.get("not_started") else []),
        f"Next seed's reference made while the worker runs (--overlap): {found.get('overlap', 'on')}; "
        f"{ahead['reference_ahead']} s of references made so, "
        f"{ahead['reference_ahead_hidden']} s of them hidden by the worker's runs.",
        "",
        "Mean seconds per judged shape, by part (ShapeResult.seconds):",
        "",
        table(["operator", "shapes", "s/shape", *found["parts_per_shape_s"]], _part_rows(found)),
        "",
        "Waiting on the worker, by request (seconds, count):",
        "",
        _meter_table(found, "requests"),
        "",
        "The judge's own functions (seconds, count):",
        "",
        _meter_table(found, "judge_functions"),
        "",
        table(
            ["operator", "worker start s", "spawned ahead s", "first profile s", "other profiles (median) s",
             "witness", "verdicts"],
            [
                [op, o["worker_start_s"], o["spawned_ahead_s"], o["profile"]["first_s"],
                 o["profile"]["others_median_s"], o["witness"], o["verdicts"]]
                for op, o in found["ops"].items()
            ],
        ),
        "",
    ]  # fmt: skip
    memory = [[op, m["label"], m["used_gib"], m["judge_reserved_gib"], m["total_gib"]]
              for op, o in found["ops"].items() if (m := o.get("gpu_memory_highest"))]  # fmt: skip
    if memory:
        lines += [
            f"The GPU's memory at its fullest (sampled every {MEMORY_SAMPLE_S} s), and what was in progress:",
            "",
            table(["operator", "request or function", "device used GiB", "judge reserved GiB", "GPU GiB"], memory),
            "",
        ]
    if found.get("probe"):
        p = found["probe"]
        lines += [
            f"Probe ({p['kernel']}, {p['window_s']} s a window): alone {p['alone']}; beside {p['spares']} spares "
            f"spawning and warming their profilers {p['beside_warming_spares']}.",
            "",
        ]
    return "\n".join(lines)


def _part_rows(found: dict[str, Any]) -> list[list[Any]]:
    keys = list(found["parts_per_shape_s"])
    rows = [[op, o["judged"], o["s_per_shape"], *(o["parts_per_shape_s"].get(k) for k in keys)]
            for op, o in found["ops"].items()]  # fmt: skip
    rows.append(["all", found["shapes_judged"], found["s_per_shape"], *found["parts_per_shape_s"].values()])
    return rows


def _cell(entry: dict[str, float] | None) -> str:
    return "" if entry is None else f"{entry['s']} ({entry['n']})"


def _meter_table(found: dict[str, Any], key: str) -> str:
    """One of the meter's tables (`requests` or `judge_functions`): an operator per row, an entry per column."""
    names = sorted({k for o in found["ops"].values() for k in o[key]})
    return table(["operator", *names], [[op, *(_cell(o[key].get(k)) for k in names)] for op, o in found["ops"].items()])


def overlap_totals(found: dict[str, Any]) -> dict[str, float]:
    """Seconds of references the judge made while the worker ran, and of them hidden by the
    worker's run (what the overlap saved), summed over operators."""
    totals = dict.fromkeys(("reference_ahead", "reference_ahead_hidden"), 0.0)
    for o in found["ops"].values():
        for name in totals:
            totals[name] += o["judge_functions"].get(name, {}).get("s", 0.0)
    return {k: round(v, 2) for k, v in totals.items()}


def summary_line(found: dict[str, Any]) -> str:
    parts = ", ".join(f"{k} {v}" for k, v in found["parts_per_shape_s"].items())
    ahead = overlap_totals(found)
    line = (
        f"judge_throughput: {found['shapes_judged']} shapes in {found['wall_s']} s = {found['s_per_shape']} s/shape "
        f"(full set ≈ {found['full_set_projection_min']} min); per shape: {parts}; witness {found['witness']}; "
        f"overlap {found.get('overlap', 'on')}: {ahead['reference_ahead']} s of references made while the worker "
        f"ran, {ahead['reference_ahead_hidden']} s of it hidden"
    )
    if found.get("probe"):
        alone, beside = found["probe"]["alone"], found["probe"]["beside_warming_spares"]
        line += (
            f"; probe median {alone['median_us']} → {beside['median_us']} µs, slowest bin "
            f"{alone['slowest_bin_median_us']} → {beside['slowest_bin_median_us']} µs"
        )
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", default=DEFAULT_OPS, help=f"comma-separated operators, or all (default {DEFAULT_OPS})")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True, help="directory for the report")
    parser.add_argument("--set", choices=("wiki", "eager"), default="wiki", help="the wiki's kernels or the references")
    parser.add_argument("--warm-profiler", choices=("on", "off"), default="on")
    parser.add_argument("--budget-s", type=float, default=115.0, help="judging stops after this (probe included)")
    parser.add_argument("--probe-s", type=float, default=10.0, help="each probe window (0: no probe)")
    parser.add_argument("--shapes", default="all", help="all, smoke or shape ids (a CPU dry run: smoke)")
    parser.add_argument(
        "--overlap",
        choices=("on", "off"),
        default="on",
        help="off: the judge makes no seed's reference while the worker runs another (the strict order)",
    )
    parser.add_argument(
        "--run-dir",
        type=Path,
        help="keep the run here and continue it: operators judged in full by an earlier call are not judged "
        "again, one its budget cut short is; the report covers every operator judged in full so far",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    catalog = Catalog()
    ops = catalog.names() if args.ops == "all" else [op.strip() for op in args.ops.split(",") if op.strip()]
    sources = candidate_set(ops, fill_with_reference=False)
    missing = [op for op in ops if op not in sources]
    if missing:
        parser.error(f"no wiki kernel for {', '.join(missing)} (gpu_wiki/kernels/<op>.py); choose others")
    if args.set == "eager":
        sources = {op: catalog.visible(op).reference_source for op in ops}
    found: dict[str, Any] = {}
    if GPU and args.warm_profiler == "on" and args.probe_s > 0:
        found["probe"] = probe(catalog, ops[0], args.probe_s)
    meter = Meter()
    with contextlib.ExitStack() as stack:
        stack.enter_context(meter.installed(started + args.budget_s))
        stack.enter_context(meter.watching_memory())
        if args.overlap == "off":  # no seed is that small; restored after the run (a test process goes on)
            stack.callback(setattr, evaluator, "OVERLAP_MAX_BYTES", evaluator.OVERLAP_MAX_BYTES)
            evaluator.OVERLAP_MAX_BYTES = -1
        run_dir = args.run_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="atrex-throughput-")))
        found["judged_again"] = prepare_run(run_dir / "run", sources)
        t0 = time.monotonic()
        evaluate_run(
            run_dir / "run",
            EvalSettings(shapes=args.shapes, seeds=args.seeds, baselines="no"),
            stream=sys.stderr,
            live=False,
            warm_profiler=args.warm_profiler == "on",
        )
        call_wall = time.monotonic() - t0
        meter.merge_into(run_dir / METER_FILE)
        results = [
            EvalResult.model_validate_json((run_dir / "run" / "eval" / f"{op}.json").read_text())
            for op in ops
            if (run_dir / "run" / "eval" / f"{op}.json").is_file()
        ]
        found.update(report(args, results, meter, call_wall, Meter.load(run_dir / METER_FILE)))
        judged_ops = {r.op for r in results}
        found["not_started"] = [op for op in ops if op not in judged_ops]
    import torch

    gpu = torch.cuda.get_device_name(0) if GPU else CPU_GPU
    found = {
        **host_record(gpu),
        "gpus": 1,
        "command": "python3 " + " ".join(sys.argv),
        "overlap": args.overlap,
        **found,
    }
    stem = report_stem(found["date"], gpu, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(found, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(found) + "\n")
    print(summary_line(found))
    return 0


def prepare_run(run_dir: Path, sources: dict[str, str]) -> list[str]:
    """The run to judge: made with `sources` when new; when kept from an earlier call, each
    operator whose result a budget cut short loses it, so it is judged again in full (bench
    eval would keep a partial result). Returns those operators."""
    if not run_dir.is_dir():
        make_run(run_dir, sources)
        return []
    kept = sorted(path.parent.parent.name for path in run_dir.glob("ops/*/submission/*.py"))
    if kept != sorted(sources):
        raise SystemExit(f"--run-dir holds a run of {', '.join(kept)}; continue it with --ops {','.join(kept)}")
    again = []
    for path in sorted((run_dir / "eval").glob("*.json")):
        if path.stem in sources and EvalResult.model_validate_json(path.read_text()).partial is not None:
            path.unlink()
            again.append(path.stem)
    return again


if __name__ == "__main__":
    raise SystemExit(main())
