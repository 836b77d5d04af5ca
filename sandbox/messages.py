"""The messages between the judge and a sandbox worker, defined once for both ends.

Requests are frozen dataclasses: the trusted side builds every request through one of them
and `Worker.request` puts `wire()` on the pipe (sandbox.protocol). Replies are TypedDicts: the
worker's handlers are annotated with them and return plain dict literals, and the judge reads
them as what they are, the worker's claims (docs/threat-model.md says which ones it checks).

The worker reads each request as the plain dict that arrives, by the field names declared
here; it imports this module for its annotations only (building these classes would add ~10 ms to
every worker's start) and never builds one of them. A class (its `__init__`, a method) is an object a
candidate could rewrite once it shares the worker's process, while a dict read through its own
lookup is not, and the worker's handlers are bound before the candidate is imported
(sandbox.worker). `tests/test_sandbox_messages.py` holds the two ends to these definitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypedDict

Wire = dict[str, Any]  # a message as it travels: JSON object, "cmd" naming the request


class ShapePayload(TypedDict):
    """The visible description of one shape: enough to build the model and its inputs."""

    id: str
    init: dict[str, Any]
    inputs: dict[str, Any]


@dataclass(frozen=True)
class Request:
    """A request to the worker; `command` names its handler there."""

    command: ClassVar[str] = ""

    def wire(self) -> Wire:
        """The message as sent (the nonce is added by the launcher's `Worker.request`)."""
        return {"cmd": self.command, **{f.name: getattr(self, f.name) for f in fields(self)}}


@dataclass(frozen=True)
class InitRequest(Request):
    """Enter the sandbox: load the problem's input generator, then restrict the process. The
    judge names the device, the input file and the rlimits; the launcher adds the rest."""

    command: ClassVar[str] = "init"
    device: str
    input_file: str
    rlimits: dict[str, int]
    landlock: dict[str, int] = field(default_factory=dict)  # path → Landlock rights
    use_landlock: bool = True
    proc_self_rights: int = 0  # the rights on the worker's own /proc/<pid>
    tcp_ports: list[int] = field(default_factory=list)
    abstract_unix: bool = False


@dataclass(frozen=True)
class LoadRequest(Request):
    """Import the candidate file and check that `Model` binds the reference's signatures."""

    command: ClassVar[str] = "load"
    candidate_file: str
    init_sets: list[dict[str, Any]]
    forward_params: list[str]


@dataclass(frozen=True)
class RunRequest(Request):
    """One correctness call on the input set of `seed`; the output goes into the arena."""

    command: ClassVar[str] = "run"
    shape: ShapePayload
    seed: int
    arena_bytes: int


@dataclass(frozen=True)
class TimeRequest(Request):
    """The timing loop: a warm-up set, then timed calls over the sets of `seeds`."""

    command: ClassVar[str] = "time"
    shape: ShapePayload
    warmup_seed: int
    seeds: list[int]
    min_calls: int
    max_calls: int
    flush_bytes: int
    fit_to_sets: bool = False  # plan the calls so the input-reuse check can decide (sandbox.timing.fit_calls_to_sets)
    # Stop the timed calls early once the median's CI half-width is within this share of the median
    # (sandbox.timing.time_calls; None: every planned call).
    stop_relative: float | None = None


@dataclass(frozen=True)
class BurstRequest(Request):
    """The witness burst: one forward on each set of `seeds`, back to back."""

    command: ClassVar[str] = "burst"
    shape: ShapePayload
    seeds: list[int]


@dataclass(frozen=True)
class KeepRequest(Request):
    """Keep only the timed outputs of `sets` (none for an empty list); with `burst_done`, drop
    the witness bursts' outputs instead."""

    command: ClassVar[str] = "keep"
    sets: list[int] = field(default_factory=list)
    burst_done: bool = False


@dataclass(frozen=True)
class FetchRequest(Request):
    """Hand over the kept output of timed input set `set` (of a burst with `burst`, of the
    captured graph burst with `graph`)."""

    command: ClassVar[str] = "fetch"
    set: int
    arena_bytes: int
    burst: bool = False
    graph: bool = False


@dataclass(frozen=True)
class ProfileRequest(Request):
    """One forward under torch.profiler: device time per kernel name."""

    command: ClassVar[str] = "profile"
    shape: ShapePayload
    seed: int


@dataclass(frozen=True)
class ForwardsRequest(Request):
    """`calls` plain forwards on one input set, each in the NVTX range `nvtx` (none when None)."""

    command: ClassVar[str] = "forwards"
    shape: ShapePayload
    seed: int
    calls: int
    nvtx: str | None = None


@dataclass(frozen=True)
class IntegrityRequest(Request):
    """Which watched primitives the candidate replaced."""

    command: ClassVar[str] = "integrity"


@dataclass(frozen=True)
class GraphCaptureRequest(Request):
    """The graph burst's capture (untimed): one forward on each set of `seeds`, in one CUDA graph."""

    command: ClassVar[str] = "graph_capture"
    shape: ShapePayload
    seeds: list[int]


@dataclass(frozen=True)
class GraphReplayRequest(Request):
    """The graph burst's timed window: refresh the float inputs from `seed`, replay, fingerprint."""

    command: ClassVar[str] = "graph_replay"
    seed: int


@dataclass(frozen=True)
class PingRequest(Request):
    """Nothing: the judge times a round trip to calibrate its witness."""

    command: ClassVar[str] = "ping"


@dataclass(frozen=True)
class WarmRequest(Request):
    """Untimed, just before a request the judge times: keep the GPU busy in the worker's own
    context for `seconds` (sandbox.timing.warm_clocks)."""

    command: ClassVar[str] = "warm"
    seconds: float


@dataclass(frozen=True)
class ExitRequest(Request):
    """End the worker's loop (sent without a nonce; no reply)."""

    command: ClassVar[str] = "exit"


REQUESTS: tuple[type[Request], ...] = (
    InitRequest,
    LoadRequest,
    RunRequest,
    TimeRequest,
    BurstRequest,
    KeepRequest,
    FetchRequest,
    ProfileRequest,
    ForwardsRequest,
    IntegrityRequest,
    PingRequest,
    WarmRequest,
    GraphCaptureRequest,
    GraphReplayRequest,
    ExitRequest,
)


class ErrorPayload(TypedDict):
    """A failed request: the worker's classification (compile/runtime only are believed) or the exception."""

    stage: str | None
    category: str | None
    type: str
    message: str
    traceback: str


class Envelope(TypedDict, total=False):
    """What every reply carries besides its body: the request's nonce, and the error when not ok."""

    nonce: str | None
    ok: bool
    error: ErrorPayload


class InitReply(TypedDict):
    isolation: dict[str, Any]
    versions: dict[str, Any]
    device: dict[str, Any]  # name, l2_bytes (on a GPU)
    cuda_init_s: float
    init_s: float


class LoadReply(TypedDict):
    load_s: float


class RunReply(TypedDict):
    output: dict[str, Any]  # the arena manifest (sandbox.handoff)
    checksums: dict[str, int]
    call_s: float
    input_bytes: int


class TimeReply(TypedDict):
    times_ms: list[float]
    synced_ms: list[float]
    noop_gap_ms: list[float]
    wall_s: float
    calls: int
    planned_calls: int
    warmup: int
    kept: list[int]
    digests: list[list[int]]
    spin_us: float | None
    host_us: list[float] | None
    replaced: list[str]


class BurstReply(TypedDict):
    digests: list[list[int]]


class GraphCaptureReply(TypedDict, total=False):
    captured: bool
    reason: str  # why no graph could be captured


class GraphReplayReply(TypedDict):
    digests: list[list[int]]


class EmptyReply(TypedDict):
    """keep, ping, warm."""


class FetchReply(TypedDict):
    output: dict[str, Any] | None


class KernelEntry(TypedDict):
    name: str
    time_us: float
    count: int
    kind: str


class ProfileReply(TypedDict):
    kernels: list[KernelEntry]
    replaced: list[str]


class ForwardsReply(TypedDict):
    calls: int
    seconds: float
    replaced: list[str]


class IntegrityReply(TypedDict):
    replaced: list[str]


REPLIES: dict[str, type] = {
    "init": InitReply,
    "load": LoadReply,
    "run": RunReply,
    "time": TimeReply,
    "burst": BurstReply,
    "keep": EmptyReply,
    "fetch": FetchReply,
    "profile": ProfileReply,
    "forwards": ForwardsReply,
    "integrity": IntegrityReply,
    "ping": EmptyReply,
    "warm": EmptyReply,
    "graph_capture": GraphCaptureReply,
    "graph_replay": GraphReplayReply,
}
