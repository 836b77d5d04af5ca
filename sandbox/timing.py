"""GPU timing with primitives captured before the candidate is imported.

`Primitives.capture()` runs at worker start. The timing loop calls only the captured
objects, so a candidate that replaces torch.cuda.Event, synchronize or time.perf_counter
does not change what is measured, and `replaced()` reports the replacement afterwards.
Where torch is built with CUDA, the loop records and reads events through the methods of
torch's C event type and synchronises through its C function (`Primitives.bound`), which
Python code cannot reassign. Everything else the loop calls (statistics, the digest, the
poison, the call order, the allocator's reserve) it holds as default arguments bound when this
module is imported: patching `sandbox.timing`, `sandbox.worker`, `statistics` or `sys.modules`
afterwards changes nothing it does. On CPU the same loop runs on host-clock events
(`host_primitives`), so the whole path can be exercised without a GPU.

Binding stops attribute rewriting, not a candidate that rewrites objects it finds through
`gc` or writes memory through ctypes: what the worker reports stays the candidate's word, and
the judge checks it against its own clock (atrex_mcp.evaluate.timing_witness).

Per timed call: L2 is flushed by reading a buffer of 2× L2 size and a GPU spin keeps the
stream busy while the host launches (both outside the timed region), then
    start.record(); out = fn(inputs[order[i]]); end.record(); synchronize device; after.record()
and a digest of the output is queued (untimed); an output older than one round of sets is poisoned.
The loop holds up to one output per input set, so before it the caching allocator is given
that many blocks of each output's size (allocated, then freed): the timed calls' outputs come
from its cache, as in a serving loop, and no call pays for a cudaMalloc the harness caused.
So `fn` must return what it computed (a tensor, or a tuple/list/dict of tensors): a bench
script timing a bare launch returns the tensor that launch wrote.
`end − start` is the call on its stream; `after − start` also covers work left running on
any other stream. A no-op run of the same loop calibrates the gap the synchronisation
itself adds, so side-stream work is detected, not guessed.
"""

from __future__ import annotations

import importlib
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from sandbox.handoff import flat_bytes, output_tensors

WATCHED = (
    "torch.cuda.Event",
    "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize",
    "torch.cuda.synchronize",
    "torch._C._cuda_synchronize",
    "torch.cuda.current_stream",
    "torch.cuda.Stream",
    "time.perf_counter",
    "time.monotonic",
    "time.time",
    "torch.allclose",
    "torch.equal",
    "torch.testing.assert_close",
    "torch.Tensor.__eq__",
    "torch.Tensor.cpu",
    "torch.Tensor.to",
    "torch.Tensor.clone",
    "torch.Tensor.fill_",
    "torch.Tensor.zero_",
    "torch.save",
    "torch.load",
    "torch.profiler.profile",
    "torch.cuda._sleep",
    # the harness itself: none of these is ever reassigned by honest code
    "sandbox.worker.time_calls",
    "sandbox.timing.time_calls",
    "sandbox.timing.digest",
    "sandbox.timing.poison",
    "sandbox.timing.Primitives",
    "sandbox.protocol.send",
    "sandbox.protocol.receive",
    "statistics.median",
    "statistics.quantiles",
    "json.dumps",
    "json.loads",
    "os.write",
    "gc.collect",
)


def _resolve(
    dotted: str,
    *,
    _import: Callable[[str], Any] = importlib.import_module,
    _getattr: Callable[[Any, str], Any] = getattr,
) -> Any:
    parts = dotted.split(".")
    obj: Any = _import(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        try:
            obj = _getattr(obj, part)
        except AttributeError:
            obj = _import(".".join(parts[: i + 1]))
    return obj


def _bound_cuda(snapshot: dict[str, Any]) -> dict[str, Any]:
    """Event record/elapsed and device synchronisation through torch's C event type and C
    function, where torch is built with CUDA (their methods cannot be reassigned from Python)."""
    base, sync = getattr(torch._C, "_CudaEventBase", None), getattr(torch._C, "_cuda_synchronize", None)
    stream = snapshot.get("torch.cuda.current_stream")
    if base is None or sync is None or stream is None or not isinstance(base, type) or base.__module__ != "torch._C":
        return {}
    event_type: Any = base
    record_c, elapsed_c = event_type.record, event_type.elapsed_time

    def record(event: Any, *, _record: Callable[..., Any] = record_c, _stream: Callable[[], Any] = stream) -> None:
        _record(event, _stream())

    def synchronize(*, _sync: Callable[[], Any] = sync) -> None:
        _sync()

    return {
        "torch.cuda.Event.record": record,
        "torch.cuda.Event.elapsed_time": elapsed_c,
        "torch.cuda.synchronize": synchronize,
    }


@dataclass
class Primitives:
    """The functions the harness trusts, as they were before any candidate code ran:
    `snapshot` (what each watched name held) and `bound` (what the timing loop calls instead
    where a safer binding exists)."""

    snapshot: dict[str, Any]
    bound: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def capture(cls) -> Primitives:
        snapshot = {}
        for name in WATCHED:
            try:
                snapshot[name] = _resolve(name)
            except (AttributeError, ImportError):
                continue
        return cls(snapshot, _bound_cuda(snapshot))

    def __getitem__(self, name: str) -> Any:
        return self.bound[name] if name in self.bound else self.snapshot[name]

    def replaced(self, *, _resolve: Callable[[str], Any] = _resolve) -> list[str]:
        """Names whose current object is not the captured one."""
        changed = []
        for name, original in self.snapshot.items():
            try:
                current = _resolve(name)
            except (AttributeError, ImportError):
                current = None
            if current is not original:
                changed.append(name)
        return changed


class HostEvent:
    """A torch.cuda.Event stand-in stamped with the host clock, for timing on CPU, where every
    call runs synchronously: `end − start` is then the call's host time."""

    __slots__ = ("t",)

    def __init__(self, enable_timing: bool = False):
        self.t = 0.0

    def record(self, *, _clock: Callable[[], float] = time.perf_counter) -> None:
        self.t = _clock()

    def elapsed_time(self, end: HostEvent) -> float:
        return (end.t - self.t) * 1e3


def host_primitives(*, _clock: Callable[[], float] = time.perf_counter) -> Primitives:
    """The timing loop's primitives on CPU: host-clock events, no device to synchronise or spin."""

    def nothing(*args: Any) -> None:
        return None

    return Primitives(
        {
            "torch.cuda.Event": HostEvent,
            "torch.cuda.Event.record": HostEvent.record,
            "torch.cuda.Event.elapsed_time": HostEvent.elapsed_time,
            "torch.cuda.synchronize": nothing,
            "time.perf_counter": _clock,
            "torch.cuda._sleep": nothing,
        }
    )


def poison(value: Any, keep: set[int]) -> None:
    """Overwrite a returned output (NaN, or all-ones bits for integers) unless it aliases an input:
    a call that hands it back later is caught by its digest. The judge poisons a copy the same way
    to know that digest."""
    for t in output_tensors(value):
        if type(t) is torch.Tensor and t.numel() and t.untyped_storage().data_ptr() not in keep:
            with torch.no_grad():
                if t.dtype.is_floating_point and t.element_size() >= 2:
                    t.fill_(float("nan"))
                else:
                    t.reshape(-1).view(torch.uint8).fill_(0xFF) if t.is_contiguous() else t.zero_()


def storages(inputs: dict[str, Any]) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in inputs.values() if isinstance(t, torch.Tensor)}


DIGEST_CHUNK_BYTES = 1 << 26  # bounds the int64 temporaries to a few hundred MiB, whatever the output size


def digest(value: Any, chunk: int = DIGEST_CHUNK_BYTES) -> torch.Tensor:
    """Exact int64 fingerprint of an output's bytes, on its device: per tensor Σ b_k and
    Σ (k+1)·b_k (wrapping). Both sides compute it with this function, so a timed call's
    digest can be matched with the bytes of an output the trusted side loaded. On a GPU one
    launch per tensor reads its bytes once (sandbox.digest_kernel); elsewhere torch sums them
    in chunks of `chunk` bytes (Σ over a chunk at offset o: o·Σ b_j + Σ (j+1)·b_j). The wrapping
    sums are the same either way and for any chunk size."""
    tensors = output_tensors(value)
    device = tensors[0].device if tensors else torch.device("cpu")
    parts = torch.zeros(2 * len(tensors), dtype=torch.int64, device=device)
    for i, t in enumerate(tensors):
        flat = flat_bytes(t)
        if flat.is_cuda and flat.device == parts.device:
            from sandbox.digest_kernel import add_byte_digest  # Triton: imported where the kernel runs

            add_byte_digest(flat, parts[2 * i : 2 * i + 2])
            continue
        pos = torch.arange(1, min(chunk, flat.numel()) + 1, device=flat.device, dtype=torch.int64)
        for offset in range(0, flat.numel(), chunk):
            b = flat[offset : offset + chunk].to(torch.int64)
            s = b.sum()
            parts[2 * i] += s
            parts[2 * i + 1] += (b * pos[: b.numel()]).sum() + offset * s
    return parts


def input_checksums(inputs: dict[str, Any], chunk: int = DIGEST_CHUNK_BYTES) -> dict[str, int]:
    """Exact Σ of each input tensor's bytes: the worker reports them and the trusted side checks
    them against its own, so both judged the same data. Summed in chunks of `chunk` bytes; one
    int64 copy of the whole input would take 8 bytes per input byte (94 GiB for the 12.6 GB input
    of per_token_group_quant_fp8 shape 9)."""
    sums = {}
    for name, t in inputs.items():
        if isinstance(t, torch.Tensor):
            flat = flat_bytes(t)
            total = torch.zeros((), dtype=torch.int64, device=flat.device)
            for offset in range(0, flat.numel(), chunk):
                total += flat[offset : offset + chunk].sum(dtype=torch.int64)
            sums[name] = int(total.item())
    return sums


def call_order(sets: int, calls: int) -> list[int]:
    """Input set of each timed call. With more calls than sets, half the sets are visited
    first and the other half are spread evenly among the reused calls, so fresh and reused
    calls share a phase and can be compared without clock drift between them."""
    if calls <= sets:
        return list(range(calls))
    head = max(1, sets // 2)
    late, rest = sets - head, calls - head
    order, fresh, reuse = list(range(head)), head, 0
    for j in range(rest):
        if (j + 1) * late // rest > j * late // rest and fresh < sets:
            order.append(fresh)
            fresh += 1
        else:
            order.append(reuse % fresh)
            reuse += 1
    return order


def reuse_phase(sets: int, calls: int) -> tuple[list[bool], int]:
    """(first visit of its set, per call) and the call where fresh and reused calls start to interleave."""
    seen: set[int] = set()
    first = []
    for index in call_order(sets, calls):
        first.append(index not in seen)
        seen.add(index)
    return first, (max(1, sets // 2) if calls > sets else calls)


REUSE_MIN_CALLS = 5  # fresh and reused calls each, in their shared phase, for the input-reuse check to decide


def reuse_checkable(sets: int, calls: int) -> bool:
    """Whether `calls` timed calls over `sets` input sets in `call_order` reuse a set and put at
    least REUSE_MIN_CALLS fresh and reused calls in their shared phase, so the input-reuse check
    (atrex_mcp.evaluate.timing_checks.input_reuse) can decide."""
    if calls <= sets:
        return False
    first, phase = reuse_phase(sets, calls)
    fresh = sum(first[phase:])
    return fresh >= REUSE_MIN_CALLS and calls - phase - fresh >= REUSE_MIN_CALLS


def fit_calls_to_sets(calls: int, sets: int, long: bool = False) -> int:
    """The timed calls to make over `sets` input sets when `calls` were planned: a set is timed
    again only where the reuse check can then tell an output cache from honest work. With too
    few sets for that (large inputs), one call per set; else enough reused calls to decide.
    Timing 20 calls over 2-8 sets without that would put 12-18 of them on reused sets with the
    check undecided, and a candidate caching its output per input set would be timed on cache hits.
    A `long` call (CallPlan.long) visits each set once where the sets hold its stop's first look:
    the adaptive stop runs only on calls that reuse no set, and with no set reused no cache can be hit."""
    if long and calls > sets >= LONG_MIN_CALLS:
        return sets
    if calls <= sets or reuse_checkable(sets, calls):
        return calls
    more = max(calls, sets + REUSE_MIN_CALLS)
    return more if reuse_checkable(sets, more) else sets


STOP_CHECK_EVERY = 10  # the adaptive stop looks at the times after every this many timed calls
# A call whose minimum sample would take longer than this is a long call: on the H200 the timed calls of
# eager attention_forward's and block_scaled_mm's shapes of 50 ms or more spread by 0.01-1.3 % (IQR), so
# 20 of them buy no precision the ±1 % stop asks for, and cost 27 s for attention_forward shape 8 (1.34 s
# a call); a noisier one (chunk_gated_delta_rule_state near 90 ms: 10-16 %) still runs to its planned calls.
LONG_TIMED_S = 2.0
LONG_MIN_CALLS = 5  # a long call's stop looks after this many calls and then every this many
LONG_CALL_MS = 50.0  # a call this long gets LONG_WARMUP_CALLS warm-up calls ...
LONG_WARMUP_CALLS = 1  # ... since the plan's two estimate calls ran just before on the same inputs
STOP_Z = 1.96  # the median's confidence interval (~95 %) the adaptive stop holds to its target


def median_ci(values: list[float], z: float = STOP_Z) -> tuple[float, float]:
    """Distribution-free confidence interval of the median of `values` (their order statistics at
    ranks n/2 ∓ z·√n/2, 1-based): no assumption about how call times are distributed."""
    ordered = sorted(values)
    n = len(ordered)
    half = z * math.sqrt(n) / 2
    low = max(1, math.floor(n / 2 - half))
    high = min(n, math.ceil(1 + n / 2 + half))
    return ordered[low - 1], ordered[high - 1]


def ci_tight(values: list[float], relative: float, *, _ci: Callable[..., tuple[float, float]] = median_ci) -> bool:
    """Whether the median's confidence interval has a half-width within `relative` of the median."""
    low, high = _ci(values)
    return (high - low) / 2 <= relative * statistics.median(values)


@dataclass
class TimedRun:
    times_ms: list[float]
    synced_ms: list[float]
    noop_gap_ms: list[float]
    wall_s: float
    kept: dict[int, Any]  # input-set index -> output of the last call on that set
    warmup_calls: int
    digests: list[list[int]]  # per timed call: digest() of its output right after the call
    spin_us: float
    host_us: list[float]  # per timed call: host time from `start.record()` to `end.record()` returning


SPIN_CYCLES_PER_US = 2000  # ~H200 boost clock; a slower clock only lengthens the spin, which is untimed
# The spin must outlast the host's whole start-event → launch → end-event window, not only the
# launch: on the H200 (measurements/timing_stalls.py) that window takes ~55 µs (median) for a one-kernel
# Triton forward whose launch alone takes ~25 µs, so a spin sized from the launch (~58 µs) is
# outrun on 10–90 % of calls and can put a 6.1 µs kernel's median at 30 µs; with 300 µs, 0–1 of
# 200 calls are outrun and every median and IQR settles (IQR 0.2–0.8 µs).
SPIN_MIN_US, SPIN_MAX_US = 300.0, 2000.0
DEFAULT_L2_BYTES = 64 << 20  # when the device does not report its L2 size
NOOP_CALIBRATION_CALLS = 50  # however few calls are timed: the side-stream rule needs a steady calibration


def flush_bytes_for(l2_bytes: int | None) -> int:
    """Size of the buffer swept before each timed call: twice the L2, so the sweep evicts every
    line the previous call left there."""
    return 2 * int(l2_bytes or DEFAULT_L2_BYTES)


WARM_MAX_S = 0.05  # the longest warm-up a request may ask for


def warm_clocks(seconds: float) -> None:
    """Keep every SM busy with matmuls for `seconds` (at most WARM_MAX_S) in this process's CUDA
    context, then synchronise; no-op without a GPU. Run right before a request the judge times
    with its own clock, so that the window does not also time the GPU coming back from idle or
    switching to this context from the judge's (its references and comparisons run just before):
    on the H200 short graph replays otherwise read ~0.7 ms long whatever their K."""
    if not torch.cuda.is_available():
        return
    a = torch.ones(2048, 2048, dtype=torch.bfloat16, device="cuda")
    c = torch.empty_like(a)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < min(seconds, WARM_MAX_S):
        for _ in range(4):
            torch.mm(a, a, out=c)
        torch.cuda.synchronize()


def _device_of(inputs: dict[str, Any]) -> torch.device:
    """Where the inputs live (the flush must hit that device's L2); CUDA when no input is a tensor."""
    return next((t.device for t in inputs.values() if isinstance(t, torch.Tensor)), torch.device("cuda"))


def _output_blocks(value: Any, protected: set[int]) -> list[tuple[int, torch.device]]:
    """(bytes, device) of each CUDA output tensor's storage that is not an input's."""
    return [
        (t.untyped_storage().nbytes(), t.device)
        for t in output_tensors(value)
        if type(t) is torch.Tensor and t.is_cuda and t.untyped_storage().data_ptr() not in protected
    ]


def _reserve_cached_blocks(blocks: list[tuple[int, torch.device]], copies: int) -> None:
    """Allocate `copies` blocks of each size and free them: the caching allocator keeps them."""
    held = [torch.empty(size, dtype=torch.uint8, device=device) for size, device in blocks for _ in range(copies)]
    del held


def time_calls(
    prims: Primitives | Mapping[str, Any],
    fn: Callable[[dict[str, Any]], Any],
    warmup_inputs: dict[str, Any],
    input_sets: list[dict[str, Any]],
    calls: int,
    warmup: int,
    flush_bytes: int,
    spin_us: float | None = None,
    flush_by_writing: bool = False,
    stop_relative: float | None = None,
    stop_after: int = 20,
    stop_every: int = STOP_CHECK_EVERY,
    *,
    _median: Callable[[list[float]], float] = statistics.median,
    _tight: Callable[[list[float], float], bool] = ci_tight,
    _digest: Callable[[Any], Any] = digest,
    _poison: Callable[[Any, set[int]], None] = poison,
    _storages: Callable[[Any], set[int]] = storages,
    _call_order: Callable[[int, int], list[int]] = call_order,
    _empty: Callable[..., Any] = torch.empty,
    _no_grad: Callable[[], Any] = torch.no_grad,
    _reserve: Callable[..., None] = _reserve_cached_blocks,
    _blocks: Callable[..., Any] = _output_blocks,
    _device_of: Callable[..., Any] = _device_of,
    _run: type = TimedRun,
) -> TimedRun:
    """Warm up on a separate input set, then `calls` timed calls over `input_sets` in `call_order`.

    Between `start` and `end` the host does nothing but the call: the input dict is looked up
    before, and a GPU spin (`torch.cuda._sleep`) queued after the L2 flush keeps the stream busy
    for longer than the host needs to launch the call, so the host's launch latency and jitter
    are not timed and the clocks do not idle between calls. `spin_us` overrides the spin's
    length; `host_us` says, per call, whether the host outran it (the GPU then idled inside the
    timed region). L2 is swept by reading the flush buffer: a write sweep (`flush_by_writing`,
    kept for measurements/timing_accuracy.py's comparison) leaves ~2× L2 of dirty lines that the timed
    call then writes back, which puts kernels streaming 32–128 MiB 10–35 % above Nsight
    Compute's invalidated-L2 time on the H200; reading brings them to 1–19 %
    (measurements/timing_accuracy.py).

    With `stop_relative`, the timed calls stop early, from `stop_after` calls on and looked at
    every `stop_every` calls (`CallPlan` sets both), once the median's confidence interval (`median_ci`) has a
    half-width within `stop_relative` of the median: a stable kernel is not timed 200 times to
    learn what 40 calls already pinned. The times are read after each call's synchronisation,
    outside the timed region. Only for runs that visit each input set once (calls ≤ sets): a run
    that reuses sets keeps its planned calls, which the input-reuse check needs."""
    Event, record, elapsed = (
        prims["torch.cuda.Event"],
        prims["torch.cuda.Event.record"],
        prims["torch.cuda.Event.elapsed_time"],
    )
    sync, perf, spin = prims["torch.cuda.synchronize"], prims["time.perf_counter"], prims["torch.cuda._sleep"]
    flush = _empty(flush_bytes, dtype=torch.uint8, device=_device_of(warmup_inputs)).zero_()
    # Read as fp32 words: torch sums bytes into int64 at a fraction of the bandwidth (a 2×L2 sweep took
    # 0.53 ms a call on the H200, 0.045 ms as fp32: measurements/flush_sweep_cost.py). Zeroed: no NaN to meet.
    sweep = flush.view(torch.float32) if flush_bytes % 4 == 0 else flush
    protected = _storages(warmup_inputs).union(*(_storages(s) for s in input_sets))

    host_s = []
    output_bytes: list[tuple[int, torch.device]] = []
    for _ in range(warmup):
        t0 = perf()
        out = fn(warmup_inputs)
        host_s.append(perf() - t0)  # the host's time to launch one call (GPU work is asynchronous)
        output_bytes = _blocks(out, protected)
        _poison(out, protected)
        sync()
    _reserve(output_bytes, copies=len(input_sets) + 2)
    if spin_us is None:
        spin_us = min(SPIN_MAX_US, max(SPIN_MIN_US, 3.0 * _median(host_s) * 1e6 + 100.0))
    cycles = int(spin_us * SPIN_CYCLES_PER_US)

    def loop(
        call: Callable[[Any], Any], plan: list[dict[str, Any] | None], check: bool, relative: float | None = None
    ) -> tuple[list[float], list[float], list[Any], list[Any], list[float]]:
        n = len(plan)
        starts = [Event(enable_timing=True) for _ in range(n)]
        ends = [Event(enable_timing=True) for _ in range(n)]
        afters = [Event(enable_timing=True) for _ in range(n)]
        outs: list[Any] = [None] * n
        sums: list[Any] = []
        host: list[float] = []
        seen: list[float] = []  # the times read so far, for the adaptive stop
        window = len(input_sets)
        done = n
        for i in range(n):
            inputs, begin, stop, after = plan[i], starts[i], ends[i], afters[i]
            flush.zero_() if flush_by_writing else sweep.sum()
            spin(cycles)
            h0 = perf()
            record(begin)
            out = call(inputs)
            record(stop)
            host.append((perf() - h0) * 1e6)
            sync()
            record(after)
            outs[i] = out
            if check:
                sums.append(_digest(out))
            if i >= window and outs[i - window] is not None:
                _poison(outs[i - window], protected)
                outs[i - window] = None
            if relative is not None and (i + 1) % stop_every == 0:
                seen += [elapsed(starts[k], ends[k]) for k in range(len(seen), i + 1)]
                if i + 1 >= stop_after and _tight(seen, relative):
                    done = i + 1
                    break
        sync()
        return (
            [elapsed(starts[i], ends[i]) for i in range(done)],
            [elapsed(starts[i], afters[i]) for i in range(done)],
            outs[:done],
            sums,
            host,
        )

    order = _call_order(len(input_sets), calls)
    with _no_grad():
        noop_t, noop_s, _, _, _ = loop(lambda inputs: None, [None] * NOOP_CALIBRATION_CALLS, False)
        wall0 = perf()
        relative = stop_relative if calls <= len(input_sets) else None
        times, synced, outs, sums, host_us = loop(fn, [input_sets[k] for k in order], True, relative)
        wall = perf() - wall0
    order = order[: len(times)]
    kept: dict[int, Any] = {}
    for k, out in zip(order, outs):
        kept[k] = out  # the last call on each set wins; None when it was poisoned since
    return _run(
        times_ms=times,
        synced_ms=synced,
        noop_gap_ms=[s - t for t, s in zip(noop_t, noop_s)],
        wall_s=wall,
        kept={k: v for k, v in kept.items() if v is not None},
        warmup_calls=warmup,
        digests=[[int(v) for v in d.tolist()] for d in sums],
        spin_us=spin_us,
        host_us=host_us,
    )


@dataclass(frozen=True)
class CallPlan:
    """How a shape's timed loop runs, from one estimate of its call: the warm-up, the planned timed
    calls, and when the adaptive stop (`time_calls`' `stop_relative`) looks at the times."""

    warmup: int  # untimed calls on the warm-up set
    calls: int  # timed calls planned (never fewer than the minimum asked for)
    first_check: int  # the stop's first look, after this many timed calls ...
    check_every: int  # ... and its next ones, at every multiple of this many
    long: bool = False  # `minimum` calls of it take over LONG_TIMED_S (fit_calls_to_sets visits each set once)


def plan_calls(estimate_ms: float, minimum: int = 20, maximum: int = 200, target_s: float = 0.25) -> CallPlan:
    """The plan for a call of about `estimate_ms`: at least `minimum` timed calls, more for short
    kernels, within about `target_s` of timed work; max(3, 20 ms of calls) warm-up calls, and
    LONG_WARMUP_CALLS from LONG_CALL_MS on. The stop first looks after `minimum` calls, every
    STOP_CHECK_EVERY; for a long call (`minimum` of them over LONG_TIMED_S) after LONG_MIN_CALLS
    and every LONG_MIN_CALLS, still only once the median's interval is within the target, so a
    noisy long kernel runs its planned calls. The plan and the stop come from the same estimate."""
    per_call = max(estimate_ms, 1e-3) / 1e3
    calls = int(min(maximum, max(minimum, target_s / per_call)))
    warmup = LONG_WARMUP_CALLS if estimate_ms >= LONG_CALL_MS else int(min(50, max(3, 0.02 / per_call)))
    if minimum * per_call > LONG_TIMED_S:
        return CallPlan(warmup, calls, min(minimum, LONG_MIN_CALLS), LONG_MIN_CALLS, long=True)
    return CallPlan(warmup, calls, minimum, STOP_CHECK_EVERY)
