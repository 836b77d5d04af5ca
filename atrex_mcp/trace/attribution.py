"""Attributing a trace's time to benchmark operators, calls and phases.

Device time (kernels, memcpy, memset) is the quantity of interest. Each device event is tied
to the host event that launched it — the runtime call with the same correlation id, else the
operator with the same External id, else the host operator running at that moment — and the
host event's ancestors decide the rest:

* operator: the OUTERMOST ancestor that a host rule claims (a serving framework's custom op, an
  aten op such as scaled_dot_product_attention, or a record_function range named like one), a
  pattern claims (consecutive aten ops that together are one operator, e.g. silu then mul), or
  that is a compiler-generated kernel whose name lists the ops it fuses; so a custom op's internal
  aten calls stay with it. Else a GPU-side range named like an operator; else a kernel-name rule;
  else "other", with a category saying what it is (GEMM, communication, memory, …).
* a generated kernel that fuses several operators is split evenly between them and reported in
  `fused` (never dropped).
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
from atrex_mcp.trace.patterns import PatternGroup, find_groups
from atrex_mcp.trace.rules import OTHER, Binding, GeneratedMatch, HostMatch, ResolvedShape, Rules

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
    source: str = ""  # how the call was recognised: the host op, pattern or generated kernel name


@dataclass
class Slice:
    """A piece of attributed time; unmapped time ("other") carries its category and deciding name."""

    op: str
    call: Call | None
    phase: Phase
    us: float
    category: str | None = None
    name: str | None = None


@dataclass
class Fused:
    """A compiler-generated kernel that computes parts of several operators."""

    ops: tuple[str, ...]
    count: int = 0
    us: float = 0.0


@dataclass
class Attribution:
    """What one trace contributes: time slices, the calls behind them, and how they were linked."""

    device: Literal["gpu", "cpu"]
    slices: list[Slice]
    calls: list[Call]
    links: Counter[str]
    fused: dict[str, Fused] = field(default_factory=dict)


Match = HostMatch | PatternGroup | GeneratedMatch | str  # str: a range's operator name


@dataclass
class _Resolved:
    op_node: HostEvent | None
    match: Match | None
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
        self.group_of: dict[int, PatternGroup] = {}
        if rules.data.patterns:
            for group in find_groups(trace.host, rules, self._claimed_without_patterns):
                for node in group.nodes:
                    self.group_of[id(node)] = group

    def _claimed_without_patterns(self, node: HostEvent) -> bool:
        """Whether a host rule, a range or a generated-kernel name claims the node or an ancestor."""
        cursor: HostEvent | None = node
        while cursor is not None:
            if self._own(cursor, patterns=False)[0] is not None:
                return True
            cursor = cursor.parent
        return False

    def _own(self, node: HostEvent, patterns: bool = True) -> tuple[Match | None, Phase | None]:
        if node.cat == "cpu_op":
            match: Match | None = self.rules.match_host(node.name, node.args)
            if match is None and patterns:
                match = self.group_of.get(id(node))
            if match is None:
                generated = self.rules.match_generated(node.name)
                match = generated if generated is not None and generated.ops else None
            return match, None
        if node.cat == "user_annotation":
            phase = self.rules.phase_of_range(node.name)
            if phase:
                return None, phase
            named = self.rules.match_range(node.name)
            if named is None and (generated := self.rules.match_generated(node.name)) is not None and generated.ops:
                return generated, None  # a generated kernel's launch recorded as a range
            return named, None
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


def attribute(
    trace: Trace,
    rules: Rules,
    templates: dict[str, tuple[dict[str, Any], dict[str, Any]]],
    forced_phase: Phase | None,
    decode_max_tokens: int,
) -> Attribution:
    """Slices and calls of one trace. `templates`: operator → (smoke init, smoke inputs) of the problem set."""
    attributor = _Attributor(trace, rules, templates)
    if trace.has_device_activity:
        attributor.attribute_device_time(trace)
        device: Literal["gpu", "cpu"] = "gpu"
    else:
        attributor.attribute_host_self_time(trace)
        device = "cpu"
    slices = attributor.slices(forced_phase, decode_max_tokens)
    unique = list({id(c): c for c in attributor.calls.values()}.values())
    return Attribution(device=device, slices=slices, calls=unique, links=attributor.links, fused=attributor.fused)


_Targets = list[tuple[str, Call | None]]


@dataclass
class _Pending:
    """A piece of time waiting for its phase: the (operator, call) targets it goes to, the phase
    its ranges gave, the host event that launched it, its µs, and (category, name) when unmapped."""

    targets: _Targets
    phase: Phase | None
    node: HostEvent | None
    us: float
    category: tuple[str, str] | None


class _Attributor:
    """One trace's attribution in progress: the calls found so far (keyed by the host event,
    range or kernel that stands for each), the time waiting for a phase, links and fused kernels."""

    def __init__(self, trace: Trace, rules: Rules, templates: dict[str, tuple[dict[str, Any], dict[str, Any]]]):
        self.rules = rules
        self.templates = templates
        self.index = _HostIndex(trace, rules)
        self.calls: dict[Any, Call] = {}
        self.pending: list[_Pending] = []
        self.links: Counter[str] = Counter()
        self.fused: dict[str, Fused] = {}

    def host_calls(self, resolved: _Resolved) -> _Targets:
        """The (operator, call) pairs a claimed host event's time goes to (several for a fused kernel)."""
        node, match = resolved.op_node, resolved.match
        assert node is not None and match is not None
        if isinstance(match, GeneratedMatch):
            return [(op, _generated_call(self.calls, node, op, match, self.rules, self.templates)) for op in match.ops]
        owner = match if isinstance(match, PatternGroup) else node
        if id(owner) not in self.calls:
            self.calls[id(owner)] = self._new_host_call(node, match, owner)
        return [(self.calls[id(owner)].op, self.calls[id(owner)])]

    def _new_host_call(
        self, node: HostEvent, match: HostMatch | PatternGroup | str, owner: HostEvent | PatternGroup
    ) -> Call:
        """A call for a host event or pattern, with its shape read from the recorded arguments
        (or the reason it could not be)."""
        rules, templates = self.rules, self.templates
        call = Call(op=_op_of(match), ts=owner.ts, thread=node.thread, source=_source_of(match, node))
        if isinstance(match, PatternGroup):
            call.tokens, call.shape, call.problem = rules.resolve_bound(
                match.op, match.rule, match.binding(), *templates.get(match.op, (None, None))
            )
        elif (origin := _shape_origin(node, match, rules)) is None:
            call.problem = (
                "a range without a shape-bearing operator inside"
                if isinstance(match, str)
                else f"{node.name} names the operator only, and no operator inside it has shapes"
            )
        else:
            host_match, args = origin
            call.tokens, call.shape, call.problem = rules.resolve_shape(
                host_match, args, *templates.get(host_match.op, (None, None))
            )
        return call

    def note_fused(self, match: Match | None, us: float) -> None:
        """Count a generated kernel that fuses several operators, so it is reported, not hidden."""
        if isinstance(match, GeneratedMatch) and len(match.ops) > 1:
            record = self.fused.setdefault(match.kernel, Fused(match.ops))
            record.count += 1
            record.us += us

    def attribute_device_time(self, trace: Trace) -> None:
        """Each device event to the host event that launched it, else to the device side's clues."""
        gpu_ranges = _gpu_ranges_around(trace.device_ranges, trace.device) if trace.device_ranges else {}
        for ev in trace.device:
            node, how = self.index.launcher(ev)
            self.links[how] += 1
            resolved = self.index.resolve(node) if node is not None else _Resolved(None, None, None)
            phase = resolved.phase
            targets: _Targets = []
            if resolved.op_node is not None:
                targets = self.host_calls(resolved)
                self.note_fused(resolved.match, ev.dur)
            around = gpu_ranges.get(id(ev), [])
            if phase is None:
                phase = next((p for r in reversed(around) if (p := self.rules.phase_of_range(r.name))), None)
            if not targets:
                targets = self._device_side_calls(ev, around)
            category = None if targets else _category(self.rules, node, ev.name, ev.cat)
            self.pending.append(_Pending(targets, phase, node, ev.dur, category))

    def _device_side_calls(self, ev: DeviceEvent, around: list[DeviceEvent]) -> _Targets:
        """For a device event no host operator claims: a GPU-side range named like an operator,
        else a kernel-name rule, else a generated kernel's name; none of them has arguments."""
        rules = self.rules
        range_node = next((r for r in around if rules.match_range(r.name)), None)
        generated = rules.match_generated(ev.name)
        if range_node is not None:
            key = id(range_node)
            if key not in self.calls:
                self.calls[key] = Call(
                    op=rules.match_range(range_node.name) or OTHER,
                    ts=range_node.ts,
                    thread=None,
                    problem="a GPU-side range: no recorded arguments",
                    source=range_node.name,
                )
            self.links["gpu_range"] += 1
            return [(self.calls[key].op, self.calls[key])]
        if (kernel_op := rules.match_kernel(ev.name)) is not None:
            call = Call(
                op=kernel_op,
                ts=ev.ts,
                thread=None,
                problem="matched by kernel name only",
                source=f"kernel {ev.name[:80]}",
            )
            self.calls[id(ev)] = call
            self.links["kernel_name"] += 1
            return [(kernel_op, call)]
        targets: _Targets = []
        if generated is not None and generated.ops:
            for op in generated.ops:
                call = Call(
                    op=op,
                    ts=ev.ts,
                    thread=None,
                    source=generated.kernel,
                    problem="a generated kernel matched by its device name only: no recorded arguments",
                )
                self.calls[(id(ev), op)] = call
                targets.append((op, call))
            self.note_fused(generated, ev.dur)
            self.links["generated_kernel_name"] += 1
        return targets

    def attribute_host_self_time(self, trace: Trace) -> None:
        """A CPU-only trace: each host operator's or working range's self time, by the same rules."""
        for node in trace.host:
            if node.cat not in ("cpu_op", "user_annotation"):
                continue
            self_us = max(0.0, node.dur - sum(c.dur for c in node.children))
            resolved = self.index.resolve(node)
            if node.cat == "user_annotation" and not _counts_as_work(node):
                continue
            targets = self.host_calls(resolved) if resolved.op_node is not None else []
            if targets:
                self.note_fused(resolved.match, self_us)
            category = None if targets else _category(self.rules, node, "", node.cat)
            self.pending.append(_Pending(targets, resolved.phase, node, self_us, category))

    def slices(self, forced_phase: Phase | None, decode_max_tokens: int) -> list[Slice]:
        """The pending time as slices, each with its phase, split evenly between its targets (whose
        calls collect the time and phases); time without targets stays "other" with its category."""
        nearest = _NearestTokens([c for c in self.calls.values() if c.tokens is not None])
        slices: list[Slice] = []
        for item in self.pending:
            phase = _phase_of(item, forced_phase, decode_max_tokens, nearest)
            if not item.targets:
                assert item.category is not None  # computed for every event without targets
                category, name = item.category
                slices.append(Slice(op=OTHER, call=None, phase=phase, us=item.us, category=category, name=name))
                continue
            share = item.us / len(item.targets)
            for op, target in item.targets:
                if target is not None:
                    target.device_us += share
                    target.phases.add(phase)
                slices.append(Slice(op=op, call=target, phase=phase, us=share))
        return slices


def _phase_of(item: _Pending, forced_phase: Phase | None, decode_max_tokens: int, nearest: _NearestTokens) -> Phase:
    """A forced phase, else the ranges' phase, else by token count: the call's own, else that of
    the nearest call on the same thread; else unknown."""
    if forced_phase is not None:
        return forced_phase
    if item.phase is not None:
        return item.phase
    tokens = next((c.tokens for _, c in item.targets if c is not None and c.tokens is not None), None)
    if tokens is None and item.node is not None:
        tokens = nearest.at(item.node.thread, item.node.ts)
    return UNKNOWN_PHASE if tokens is None else ("decode" if tokens <= decode_max_tokens else "prefill")


COMPILED_GRAPH_RANGE = "## Call CompiledFxGraph"


def _counts_as_work(node: HostEvent) -> bool:
    """In a CPU-only trace a range's self time is Python overhead, except a compiled graph's call
    range, whose self time is the generated C++ kernels that the profiler does not name."""
    return node.name.startswith(COMPILED_GRAPH_RANGE)


def _category(rules: Rules, node: HostEvent | None, device_name: str, device_cat: str) -> tuple[str, str]:
    """What unmapped time is (GEMM, communication, memory, generated, other operators, unknown)."""
    names: list[str] = []
    cursor = node
    while cursor is not None:
        if cursor.cat in ("cpu_op", "user_annotation") and rules.phase_of_range(cursor.name) is None:
            names.append(cursor.name)
        cursor = cursor.parent
    category, name = rules.unmapped_category(names, device_name, device_cat)
    if category == "other_ops":
        generated = next((g for n in names if (g := rules.match_generated(n)) is not None), None)
        if generated is not None:
            return "generated", generated.kernel
        if name.startswith(COMPILED_GRAPH_RANGE):
            return "generated", (
                "compiled graph call outside named kernels (name CPU kernels with cpp.enable_kernel_profile)"
            )
    elif category == "unknown" and device_name and (generated := rules.match_generated(device_name)) is not None:
        return "generated", generated.kernel
    return category, name


def _generated_call(
    calls: dict[Any, Call],
    node: HostEvent,
    op: str,
    match: GeneratedMatch,
    rules: Rules,
    templates: dict[str, tuple[dict[str, Any], dict[str, Any]]],
) -> Call:
    """One call per operator of a generated kernel launch; its shape from the launch's recorded
    arguments where the rules say how (GPU Inductor launches record them; CPU kernels do not)."""
    key = (id(node), op)
    if key not in calls:
        call = Call(op=op, ts=node.ts, thread=node.thread, source=match.kernel)
        source = rules.data.generated.shapes.get(op) if rules.data.generated else None
        if "Input Dims" not in node.args:
            call.problem = "shape incomplete: the generated kernel's launch records no argument shapes"
        elif source is None:
            call.problem = f"shape incomplete: no rule reads {op}'s shape from a generated kernel's arguments"
        else:
            call.tokens, call.shape, call.problem = rules.resolve_bound(
                op, source, generated_binding(node.args), *templates.get(op, (None, None))
            )
        calls[key] = call
    return calls[key]


def generated_binding(event_args: dict[str, Any]) -> Binding:
    """A generated kernel's recorded arguments as t0, t1, … (tensor dims), tl (last tensor) and
    n0, n1, … (integer arguments, e.g. xnumel and r0_numel), in launch order."""
    binding = Binding({}, {}, set())
    dims = event_args.get("Input Dims") or []
    types = event_args.get("Input type") or []
    concrete = event_args.get("Concrete Inputs") or []
    tensors = ints = 0
    for i, item in enumerate(dims):
        kind = types[i] if i < len(types) else ""
        value = concrete[i] if i < len(concrete) else ""
        if isinstance(value, str) and value.lstrip("-").isdigit():
            binding.values[f"n{ints}"] = int(value)
            ints += 1
        elif isinstance(item, list) and item and kind not in ("", "Scalar", "ScalarList", "GenericList", "None"):
            binding.values[f"t{tensors}"] = list(item)
            binding.dtypes[f"t{tensors}"] = kind
            binding.values["tl"] = list(item)
            binding.dtypes["tl"] = kind
            tensors += 1
    return binding


def _source_of(match: Match, node: HostEvent) -> str:
    if isinstance(match, PatternGroup):
        return "pattern " + "+".join(n.name for n in match.nodes if not match.absorbed(n))
    return node.name


def _op_of(match: HostMatch | PatternGroup | str | None) -> str:
    if isinstance(match, (HostMatch, PatternGroup)):
        return match.op
    return match or OTHER


def _shape_origin(
    node: HostEvent, match: HostMatch | str | None, rules: Rules
) -> tuple[HostMatch, dict[str, Any]] | None:
    """Where a call's shape is read from: the node itself (a host op whose rule binds arguments), or
    for a range or an operator-only rule (no `args`, e.g. vllm::unified_attention_with_output) the
    first operator of the same family inside it that binds some (the flash-attention op it calls,
    a custom op within record_function('atrex::rms_norm'))."""
    if isinstance(match, HostMatch) and match.rule.args:
        return match, node.args
    op = match.op if isinstance(match, HostMatch) else match
    queue = deque(node.children)
    while queue:
        child = queue.popleft()
        if child.cat == "cpu_op":
            inner = rules.match_host(child.name, child.args)
            if inner is not None and inner.op == op and inner.rule.args:
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
