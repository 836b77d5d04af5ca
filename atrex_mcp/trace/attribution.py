"""Attributing a trace's time to benchmark operators, calls and phases.

Device time (kernels, memcpy, memset) is the quantity of interest. Each device event is tied
to the host event that launched it — the runtime call with the same correlation id, else the
operator with the same External id, else the host operator running at that moment — and the
host event's ancestors decide the rest:

* operator: the OUTERMOST ancestor that a host rule claims (a serving framework's custom op, or
  a record_function range named like one), so a custom op's internal aten calls stay with it;
  else a GPU-side range named like an operator; else a kernel-name rule; else "other".
* phase: a forced phase; else the nearest enclosing range named prefill/decode (host side, then
  GPU side); else the call's own token count (decode when ≤ decode_max_tokens); else the token
  count of the nearest call on the same thread (an unmapped GEMM belongs to the step around it);
  else "unknown".

A trace without any device activity (CPU-only profiling) attributes each cpu_op's SELF time
instead, with the same rules; the manifest records "device": "cpu".
"""

from __future__ import annotations

import bisect
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Literal

from atrex_mcp.trace.events import LAUNCH_CATEGORIES, DeviceEvent, HostEvent, Trace, thread_roots
from atrex_mcp.trace.rules import OTHER, HostMatch, ResolvedShape, Rules

Phase = str
UNKNOWN_PHASE = "unknown"


@dataclass(eq=False)
class Call:
    """One invocation of a benchmark operator (a host op, a range, or a kernel matched by name)."""

    op: str
    ts: float
    thread: tuple[Any, Any] | None
    tokens: int | None = None
    shape: ResolvedShape | None = None
    problem: str | None = None
    device_us: float = 0.0
    phases: set[Phase] = field(default_factory=set)


@dataclass
class Slice:
    """A piece of attributed time."""

    op: str
    call: Call | None
    phase: Phase
    us: float


@dataclass
class Attribution:
    """What one trace contributes: time slices, the calls behind them, and how they were linked."""

    device: Literal["gpu", "cpu"]
    slices: list[Slice]
    calls: list[Call]
    links: Counter[str]


@dataclass
class _Resolved:
    op_node: HostEvent | None
    match: HostMatch | str | None  # a HostMatch for a cpu_op, the operator name for a range
    phase: Phase | None


class _HostIndex:
    """Per-trace lookups from host events to operator, call and phase (memoised up the tree)."""

    def __init__(self, trace: Trace, rules: Rules):
        self.rules = rules
        self._memo: dict[int, _Resolved] = {}
        self.roots = thread_roots(trace.host)
        self._starts: dict[int, list[float]] = {}
        self.launch_by_correlation: dict[Any, HostEvent] = {}
        self.op_by_external_id: dict[Any, HostEvent] = {}
        for ev in trace.host:
            if ev.cat in LAUNCH_CATEGORIES and "correlation" in ev.args:
                self.launch_by_correlation[ev.args["correlation"]] = ev
            elif ev.cat == "cpu_op" and "External id" in ev.args:
                self.op_by_external_id.setdefault(ev.args["External id"], ev)

    def _own(self, node: HostEvent) -> tuple[HostMatch | str | None, Phase | None]:
        if node.cat == "cpu_op":
            return self.rules.match_host(node.name, node.args), None
        if node.cat == "user_annotation":
            phase = self.rules.phase_of_range(node.name)
            return (None, phase) if phase else (self.rules.match_range(node.name), None)
        return None, None

    def resolve(self, node: HostEvent) -> _Resolved:
        chain: list[HostEvent] = []
        cursor: HostEvent | None = node
        while cursor is not None and id(cursor) not in self._memo:
            chain.append(cursor)
            cursor = cursor.parent
        above = self._memo[id(cursor)] if cursor is not None else _Resolved(None, None, None)
        for item in reversed(chain):
            match, phase = self._own(item)
            if above.op_node is None and match is not None:
                above = _Resolved(item, match, phase or above.phase)
            else:
                above = _Resolved(above.op_node, above.match, phase or above.phase)
            self._memo[id(item)] = above
        return above

    def launcher(self, ev: DeviceEvent) -> tuple[HostEvent | None, str]:
        """The host event behind a device event, and how it was found."""
        corr = ev.args.get("correlation")
        if corr is not None and corr in self.launch_by_correlation:
            return self.launch_by_correlation[corr], "correlation"
        ext = ev.args.get("External id")
        if ext is not None and ext in self.op_by_external_id:
            return self.op_by_external_id[ext], "external_id"
        node = self.innermost_at(ev.ts)
        return node, ("time_containment" if node is not None else "none")

    def innermost_at(self, t: float) -> HostEvent | None:
        """The deepest host operator or range running at time t, on any thread."""
        best: HostEvent | None = None
        best_depth = -1
        for events in self.roots.values():
            depth, level, found = 0, events, None
            while level:
                starts = self._starts.setdefault(id(level), [e.ts for e in level])
                i = bisect.bisect_right(starts, t) - 1
                if i < 0 or level[i].end < t or level[i].cat not in ("cpu_op", "user_annotation"):
                    break
                found, level, depth = level[i], level[i].children, depth + 1
            if found is not None and depth > best_depth:
                best, best_depth = found, depth
        return best


def _gpu_ranges_around(ranges: list[DeviceEvent], device: list[DeviceEvent]) -> dict[int, list[DeviceEvent]]:
    """For each device event, the GPU-side ranges (gpu_user_annotation) of its device that contain
    it, outermost first: one sweep in time order with the set of ranges open at each start."""
    around: dict[int, list[DeviceEvent]] = {}
    by_device: dict[Any, list[DeviceEvent]] = {}
    for r in ranges:
        by_device.setdefault(r.stream[0], []).append(r)
    for dev, items in by_device.items():
        items.sort(key=lambda r: (r.ts, -r.dur))
        events = sorted((e for e in device if e.stream[0] == dev), key=lambda e: e.ts)
        open_ranges: list[DeviceEvent] = []
        i = 0
        for ev in events:
            while i < len(items) and items[i].ts <= ev.ts:
                open_ranges.append(items[i])
                i += 1
            open_ranges = [r for r in open_ranges if r.end >= ev.ts]
            inside = [r for r in open_ranges if r.end >= ev.end - 0.01]
            if inside:
                around[id(ev)] = inside
    return around


def attribute(trace: Trace, rules: Rules, templates: dict[str, tuple[dict[str, Any], dict[str, Any]]],
              forced_phase: Phase | None, decode_max_tokens: int) -> Attribution:
    """Slices and calls of one trace. `templates`: operator → (smoke init, smoke inputs) of the problem set."""
    index = _HostIndex(trace, rules)
    calls: dict[int, Call] = {}
    pending: list[tuple[str, Call | None, Phase | None, HostEvent | None, float]] = []
    links: Counter[str] = Counter()

    def host_call(resolved: _Resolved) -> Call:
        node = resolved.op_node
        assert node is not None
        if id(node) not in calls:
            call = Call(op=_op_of(resolved.match), ts=node.ts, thread=node.thread)
            origin = _shape_origin(node, resolved.match, rules)
            if origin is None:
                call.problem = "a range without a shape-bearing operator inside"
            else:
                match, args = origin
                call.tokens, call.shape, call.problem = rules.resolve_shape(match, args, *templates.get(match.op, (None, None)))
            calls[id(node)] = call
        return calls[id(node)]

    if trace.has_device_activity:
        gpu_ranges = _gpu_ranges_around(trace.device_ranges, trace.device) if trace.device_ranges else {}
        for ev in trace.device:
            node, how = index.launcher(ev)
            links[how] += 1
            resolved = index.resolve(node) if node is not None else _Resolved(None, None, None)
            phase = resolved.phase
            call: Call | None = None
            if resolved.op_node is not None:
                call = host_call(resolved)
            around = gpu_ranges.get(id(ev), [])
            if phase is None:
                phase = next((p for r in reversed(around) if (p := rules.phase_of_range(r.name))), None)
            if call is None:
                range_node = next((r for r in around if rules.match_range(r.name)), None)
                if range_node is not None:
                    key = id(range_node)
                    if key not in calls:
                        calls[key] = Call(op=rules.match_range(range_node.name) or OTHER, ts=range_node.ts, thread=None,
                                          problem="a GPU-side range: no recorded arguments")
                    call = calls[key]
                    links["gpu_range"] += 1
                elif (kernel_op := rules.match_kernel(ev.name)) is not None:
                    call = Call(op=kernel_op, ts=ev.ts, thread=None, problem="matched by kernel name only")
                    calls[id(ev)] = call
                    links["kernel_name"] += 1
            pending.append((call.op if call else OTHER, call, phase, node, ev.dur))
        device: Literal["gpu", "cpu"] = "gpu"
    else:
        for node in trace.host:
            if node.cat != "cpu_op":
                continue
            self_us = max(0.0, node.dur - sum(c.dur for c in node.children))
            resolved = index.resolve(node)
            call = host_call(resolved) if resolved.op_node is not None else None
            pending.append((call.op if call else OTHER, call, resolved.phase, node, self_us))
        device = "cpu"

    nearest = _NearestTokens([c for c in calls.values() if c.tokens is not None])
    slices: list[Slice] = []
    for op, call, phase, node, us in pending:
        if forced_phase is not None:
            phase = forced_phase
        elif phase is None:
            tokens = call.tokens if call is not None else None
            if tokens is None and node is not None:
                tokens = nearest.at(node.thread, node.ts)
            phase = UNKNOWN_PHASE if tokens is None else ("decode" if tokens <= decode_max_tokens else "prefill")
        if call is not None:
            call.device_us += us
            call.phases.add(phase)
        slices.append(Slice(op=op, call=call, phase=phase, us=us))
    return Attribution(device=device, slices=slices, calls=list(calls.values()), links=links)


def _op_of(match: HostMatch | str | None) -> str:
    return match.op if isinstance(match, HostMatch) else (match or OTHER)


def _shape_origin(node: HostEvent, match: HostMatch | str | None, rules: Rules) -> tuple[HostMatch, dict[str, Any]] | None:
    """Where a call's shape is read from: the node itself (a host op), or for a range the first
    operator of the same family inside it (e.g. a custom op within record_function('atrex::rms_norm'))."""
    if isinstance(match, HostMatch):
        return match, node.args
    queue = deque(node.children)
    while queue:
        child = queue.popleft()
        if child.cat == "cpu_op":
            inner = rules.match_host(child.name, child.args)
            if inner is not None and inner.op == match:
                return inner, child.args
        queue.extend(child.children)
    return None


class _NearestTokens:
    """Token count of the call nearest in time on the same host thread."""

    def __init__(self, calls: list[Call]):
        self.by_thread: dict[Any, tuple[list[float], list[int]]] = {}
        for call in sorted((c for c in calls if c.thread is not None), key=lambda c: c.ts):
            times, tokens = self.by_thread.setdefault(call.thread, ([], []))
            times.append(call.ts)
            tokens.append(call.tokens)  # type: ignore[arg-type]

    def at(self, thread: Any, t: float) -> int | None:
        if thread not in self.by_thread:
            return None
        times, tokens = self.by_thread[thread]
        i = bisect.bisect_left(times, t)
        candidates = [j for j in (i - 1, i) if 0 <= j < len(times)]
        return tokens[min(candidates, key=lambda j: abs(times[j] - t))] if candidates else None
