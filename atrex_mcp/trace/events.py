"""Reading a torch.profiler (Kineto) Chrome-trace file into host and device events.

`export_chrome_trace` writes `{"traceEvents": [...], ...}` (a bare list is also valid Chrome
trace JSON; `.gz` files are read transparently). Only complete events (`"ph": "X"`) of the
categories below matter; everything else (metadata, flows, instants, Python frames) is
skipped. Structure is checked before anything is attributed, so a truncated or hand-edited
file fails here with the event index that is wrong, never half-way through an import.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from atrex_mcp.errors import AtrexError

HOST_CATEGORIES = frozenset({"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"})
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
DEVICE_RANGE_CATEGORY = "gpu_user_annotation"
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})


@dataclass(eq=False)
class HostEvent:
    """A host-side interval: an operator, a record_function range or a runtime call."""

    index: int
    cat: str
    name: str
    ts: float
    dur: float
    thread: tuple[Any, Any]
    args: dict[str, Any]
    parent: HostEvent | None = None
    children: list[HostEvent] = field(default_factory=list)

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(eq=False)
class DeviceEvent:
    """Device activity (kernel, memcpy, memset) or a GPU-side projection of a range."""

    index: int
    cat: str
    name: str
    ts: float
    dur: float
    stream: tuple[Any, Any]
    args: dict[str, Any]

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class Trace:
    """One profiler trace: events, a content hash for the manifest, and what the device was."""

    path: Path
    sha256: str
    host: list[HostEvent]
    device: list[DeviceEvent]
    device_ranges: list[DeviceEvent]
    device_names: list[str]

    @property
    def has_device_activity(self) -> bool:
        return bool(self.device)


def _bad(path: Path, message: str, hint: str = "") -> AtrexError:
    return AtrexError(
        "input",
        "bad_trace",
        f"{path.name}: {message}",
        hint
        or "Export the trace with torch.profiler's export_chrome_trace (record_shapes=True) and pass the complete "
        "file.",
    )


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise AtrexError("input", "bad_trace", f"Cannot read trace {path}: {exc.strerror or exc}.") from exc
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise _bad(path, f"the gzip stream is damaged or truncated ({exc}).") from exc
    return raw


def _unclosed(raw: bytes) -> bool:
    """Whether the text ends inside a string or an open object/array: the mark of a cut-off file
    (only scanned on the error path)."""
    depth, in_string, escaped = 0, False, False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x7B, 0x5B):  # { [
            depth += 1
        elif byte in (0x7D, 0x5D):  # } ]
            depth -= 1
    return in_string or depth > 0


def _number(value: Any) -> TypeGuard[int | float]:
    """A finite int or float (not a bool); `v - v == 0` is false for NaN and ±inf."""
    return (type(value) is float or type(value) is int) and value - value == 0


def load_trace(path: Path) -> Trace:
    """Parse and validate one trace file; AtrexError(input/bad_trace) on anything malformed."""
    path = Path(path)
    raw = _read_bytes(path)
    digest = hashlib.sha256(raw).hexdigest()
    try:
        document = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise _bad(path, f"not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    except json.JSONDecodeError as exc:
        what = "ends before the JSON is complete (truncated?)" if _unclosed(raw) else "is not valid JSON"
        raise _bad(path, f"{what}: {exc.msg} at line {exc.lineno}, column {exc.colno}.") from None
    if isinstance(document, dict):
        events = document.get("traceEvents")
        properties = document.get("deviceProperties") or []
    else:
        events, properties = document, []
    if not isinstance(events, list):
        raise _bad(path, "no 'traceEvents' list: this is not a Chrome/Kineto trace.")

    host: list[HostEvent] = []
    device: list[DeviceEvent] = []
    ranges: list[DeviceEvent] = []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise _bad(path, f"event {i} is a {type(ev).__name__}, not an object.")
        if ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        if cat not in HOST_CATEGORIES and cat not in DEVICE_CATEGORIES and cat != DEVICE_RANGE_CATEGORY:
            continue
        name, ts, dur, args = ev.get("name"), ev.get("ts"), ev.get("dur", 0), ev.get("args") or {}
        if not isinstance(name, str) or not _number(ts) or not _number(dur) or dur < 0 or not isinstance(args, dict):
            raise _bad(
                path, f"event {i} ({cat}) lacks a name, a finite 'ts' or a non-negative 'dur': {json.dumps(ev)[:200]}"
            )
        where = (ev.get("pid"), ev.get("tid"))
        if cat in HOST_CATEGORIES:
            host.append(HostEvent(i, cat, name, float(ts), float(dur), where, args))
        else:
            item = DeviceEvent(i, cat, name, float(ts), float(dur), where, args)
            (ranges if cat == DEVICE_RANGE_CATEGORY else device).append(item)
    if not device and not any(e.cat == "cpu_op" for e in host):
        raise _bad(
            path,
            "it holds no operator or kernel events.",
            "Profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] and record_shapes=True around the "
            "model's forward steps.",
        )
    names = [str(p.get("name")) for p in properties if isinstance(p, dict) and p.get("name")]
    _link_host_tree(host)
    return Trace(path=path, sha256=digest, host=host, device=device, device_ranges=ranges, device_names=names)


# Kineto rounds timestamps to 1 ns; a child may appear to end a hair after its parent.
_TOLERANCE_US = 0.01
# When a range and an operator start together, the longer one encloses; on a tie the
# range (record_function) is outermost, then the operator, then the runtime call it makes.
_NESTING_RANK = {"user_annotation": 0, "cpu_op": 1, "cuda_runtime": 2, "cuda_driver": 3}


def _link_host_tree(host: list[HostEvent]) -> None:
    """Nest each thread's intervals by time containment (a sweep with a stack)."""
    by_thread: dict[tuple[Any, Any], list[HostEvent]] = {}
    for ev in host:
        by_thread.setdefault(ev.thread, []).append(ev)
    for events in by_thread.values():
        events.sort(key=lambda e: (e.ts, -e.dur, _NESTING_RANK[e.cat]))
        stack: list[HostEvent] = []
        for ev in events:
            while stack and not _inside(ev, stack[-1]):
                stack.pop()
            if stack:
                ev.parent = stack[-1]
                stack[-1].children.append(ev)
            stack.append(ev)


def _inside(child: HostEvent, parent: HostEvent) -> bool:
    return child.ts >= parent.ts - _TOLERANCE_US and child.end <= parent.end + _TOLERANCE_US


def thread_roots(host: list[HostEvent]) -> dict[tuple[Any, Any], list[HostEvent]]:
    """Top-level host events per thread, in time order (for lookups by timestamp)."""
    roots: dict[tuple[Any, Any], list[HostEvent]] = {}
    for ev in host:
        if ev.parent is None:
            roots.setdefault(ev.thread, []).append(ev)
    for events in roots.values():
        events.sort(key=lambda e: e.ts)
    return roots
