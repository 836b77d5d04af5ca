"""The MCP server: thin tool adapters over the services (catalog, evaluator, roofline, wiki,
profiling, package). What a tool may reveal is atrex_mcp.policy's decision; this module only
wires arguments to services and results to the policy's views.

`build_server(config)` returns an `MCPServer` ready for any transport. Tools of other parts
(run memory) join through `ServerContext.add_tool`, so every tool shares the same error
handling, benchmark-mode redaction, output cap, GPU queue and cancellation.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import json
import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import anyio.lowlevel
from mcp.server import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from atrex_mcp import __version__, candidate_contract
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.errors import AtrexError, ErrorInfo
from atrex_mcp.server.gpu_queue import GpuQueue, JobKind
from atrex_mcp.knowledge import Knowledge, default_knowledge, withheld_operators
from atrex_mcp.paths import default_state_dir, problems_dir
from atrex_mcp.policy import Policy
from atrex_mcp.server.models import (
    DtypePathArg,
    HardwareArg,
    Mode,
    OpArg,
    PackageOutput,
    PathArg,
    ProblemDetail,
    ProblemList,
    ProblemSummary,
    ProfileResult,
    RooflineResult,
    SeedsArg,
    ShapesArg,
    SourceArg,
    ValidateResult,
    WikiReadResult,
    WikiSearchResult,
)
from atrex_mcp.server.transport import LOCAL_CLIENT
from atrex_mcp.wiki.corpus import OP_FAMILIES
from atrex_mcp.workspace import DEFAULT_MAX_SOURCE_BYTES, Workspace

logger = logging.getLogger(__name__)

T = TypeVar("T")
OutputT = TypeVar("OutputT", bound=BaseModel)
ThreadProgress = Callable[[str, float], None]

DEFAULT_MAX_OUTPUT_CHARS = 60_000  # ~15k tokens: inside Claude Code's 25k-token default for one tool result
MAX_ERROR_CHARS = 6_000
CANCEL_GRACE_S = 30.0  # how long a cancelled call waits for its worker to be killed before giving the GPU back
_MIN_KEPT_CHARS = 200

INSTRUCTIONS = """\
atrex-mcp serves GPU-kernel problems from LLM serving traces and judges candidate kernels.
Typical loop: list_problems -> get_problem(op) -> write a Triton kernel file (class Model, same
signature as the reference) -> validate(op, source or path, shapes=['smoke']) until correct ->
validate on all shapes -> profile_kernel for where the time goes -> package(op, ...) for the
deliverable. wiki_search/wiki_read hold GPU optimisation knowledge and validated kernels.
roofline_lookup is a speed-of-light calculator. Every error names its stage, category and a hint.
"""
WIKI_SENTENCE = "wiki_search/wiki_read hold GPU optimisation knowledge and validated kernels.\n"


@dataclass
class ServerConfig:
    """How one server instance is set up (the `serve` command's options)."""

    mode: Mode = "optimize"
    problems: list[Path] = field(default_factory=lambda: [problems_dir()])
    hardware: str = "h200"
    state_dir: Path = field(default_factory=default_state_dir)
    workspaces: list[Path] = field(default_factory=lambda: [Path.cwd()])
    correctness_limit: int = 2
    max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    devices: list[str] | None = None  # None: detected on first use (see _detect_devices)
    tools: list[str] | None = None  # an allow-list: only these tools are registered (None: every tool)
    cluster: Any = None  # an atrex_mcp.cluster.remote.ClusterPool: GPU work runs on the cluster, not the local queue
    knowledge: Knowledge | None = None  # None: general in benchmark mode, full in optimize mode


OP_FAMILY_HELP = f"Only this operator family, one of: {', '.join(OP_FAMILIES)}."


def _detect_devices() -> list[str]:
    """One queue device per GPU the work can really be placed on. The evaluator (and the run
    judge) use the process's current CUDA device, so every GPU job lands on it: the queue holds
    that one device, else timed jobs granted a second GPU would overlap on the first."""
    import torch

    return ["cuda:0"] if torch.cuda.is_available() else ["cpu"]


def format_error(info: ErrorInfo) -> str:
    """The text of a tool error: all four fields, labelled, so an agent can act on them."""
    text = f"stage: {info.stage}\ncategory: {info.category}\nmessage: {info.message}"
    return f"{text}\nhint: {info.hint}" if info.hint else text


_SDK_ARGUMENT_ERROR = re.compile(r"^Error executing tool (?P<tool>[\w.-]+): (?P<detail>\d+ validation errors? for .*)", re.S)
_SDK_UNKNOWN_TOOL = re.compile(r"^Unknown tool: (?P<tool>.*)$", re.S)


_PYDANTIC_DETAIL = re.compile(r"^(?P<message>.*?) \[type=(?P<type>[\w.-]+),.*\]$")
_LOCATION = re.compile(r"^[A-Za-z_][\w]*(?:\.(?:[A-Za-z_]\w*|\d+))*$")


def _without_input(line: str) -> str:
    """One line of a pydantic error without the caller's input: the message keeps its type and
    drops `input_value=…`; a location line that is not plain field names and indices (a caller's
    dict key) is replaced by a placeholder."""
    if m := _PYDANTIC_DETAIL.match(line):
        return f"{m['message']} [type={m['type']}]"
    if line.startswith(" ") or line.endswith(("validation error for", "validation errors for")) or "validation error" in line:
        return line
    return line if _LOCATION.match(line) and len(line) <= 128 else "<argument>"


def _sdk_error_info(text: str, tools: list[str]) -> ErrorInfo | None:
    """The SDK's own tool errors (arguments that fail the schema, an unknown tool name) in the
    four-field form every other error has; None for errors that already have it."""
    if m := _SDK_ARGUMENT_ERROR.match(text):
        detail = "\n".join(_without_input(line) for line in m["detail"].splitlines() if "errors.pydantic.dev" not in line)
        return ErrorInfo(stage="input", category="invalid_arguments", message=detail,
                         hint=f"Fix the named argument; {m['tool']}'s input schema gives every argument's type, range and default.")
    if m := _SDK_UNKNOWN_TOOL.match(text):
        return ErrorInfo(stage="input", category="unknown_tool", message="Unknown tool.",
                         hint=f"Valid choices: {', '.join(sorted(tools))}")
    return None


def _cut(text: str, keep: int) -> str:
    return text[:keep] + f"\n… [truncated by the server: {keep} of {len(text)} characters shown]"


def fit_output(model: OutputT, limit: int) -> OutputT:
    """Cut the longest texts (then the longest lists) of a result until its JSON fits `limit`
    characters; every cut is marked where it happened and listed in `notes`."""
    if len(model.model_dump_json()) <= limit:
        return model
    data = model.model_dump()
    cuts: list[str] = []

    def leaves(node: Any, kind: type, path: str = "") -> list[tuple[Any, Any, str]]:
        found: list[tuple[Any, Any, str]] = []
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
        for key, value in items:
            where = f"{path}.{key}" if path else str(key)
            if isinstance(value, kind):
                found.append((node, key, where))
            found.extend(leaves(value, kind, where))
        return found

    for kind in (str, list):
        while (excess := len(json.dumps(data)) - limit) > 0:
            candidates = [leaf for leaf in leaves(data, kind) if leaf[2] != "notes" and len(leaf[0][leaf[1]]) > (_MIN_KEPT_CHARS if kind is str else 1)]
            if not candidates:
                break
            container, key, where = max(candidates, key=lambda leaf: len(json.dumps(leaf[0][leaf[1]])))
            value = container[key]
            if kind is str:
                container[key] = _cut(value, max(_MIN_KEPT_CHARS, len(value) - excess - 200))
            else:
                container[key] = value[: len(value) // 2]
                where = f"{where} (first {len(container[key])} of {len(value)} items)"
            cuts.append(where)
    if cuts and "notes" in data:
        data["notes"].append(f"The result exceeded {limit} characters; the server truncated: {', '.join(dict.fromkeys(cuts))}.")
    return type(model).model_validate(data)


class _ProgressBridge:
    """MCP progress notifications for one call: from the event loop or from the worker thread,
    always increasing (0-100) as the protocol requires."""

    def __init__(self, mcp_ctx: Context | None, label: str):
        self._ctx = mcp_ctx
        self._label = label
        self._last = 0.0
        self._token = anyio.lowlevel.current_token()

    async def send(self, message: str, fraction: float | None = None) -> None:
        if self._ctx is None:
            return
        # Strictly increasing, as the protocol requires, even for messages that do not advance.
        self._last = max(100.0 * fraction if fraction is not None else 0.0, self._last + 0.01)
        await self._ctx.report_progress(self._last, 100.0, f"{self._label}: {message}")

    def from_thread(self, message: str, fraction: float) -> None:
        """For the evaluator's thread; a call that has already ended is silently not told."""
        try:
            anyio.from_thread.run(self.send, message, fraction, token=self._token)
        except Exception:  # the call was cancelled or the client left: progress has nobody to go to
            logger.debug("progress dropped for %s", self._label)


class ServerContext:
    """What every tool adapter shares: configuration, policy, services and the GPU queue."""

    def __init__(self, config: ServerConfig, server: MCPServer):
        self.config = config
        self.server = server
        self.catalog = Catalog(config.problems)
        self.knowledge: Knowledge = config.knowledge or default_knowledge(config.mode == "benchmark")
        self.policy = Policy(config.mode, self.catalog, knowledge=self.knowledge)
        # Wiki documents that solve a served operator, withheld under the general condition.
        self.withheld = withheld_operators(self.knowledge, self.catalog.names())
        self.state_dir = config.state_dir
        # Sandbox workers treat the state directory as protected (evaluate.session.protected_roots
        # reads it from here): a --state-dir elsewhere must be as unreachable as the default.
        os.environ["ATREX_STATE_DIR"] = str(Path(config.state_dir).resolve())
        self.workspace = Workspace(config.workspaces, denied=[*self.catalog.roots, config.state_dir],
                                   max_source_bytes=config.max_source_bytes)
        self._queue: GpuQueue | None = None
        self._wiki: Any = None
        self._wiki_lock = threading.Lock()
        self.offered: list[str] = []  # every tool name offered for registration, allowed or not

    # ------------------------------------------------------------ tool registration
    def _error_text(self, info: ErrorInfo) -> str:
        """Errors carry no hidden data and no caller text, so they need no filter (one that
        compared them with hidden values would be an oracle: atrex_mcp.policy)."""
        text = format_error(info)
        return _cut(text, MAX_ERROR_CHARS) if len(text) > MAX_ERROR_CHARS else text

    def _tool_error(self, info: ErrorInfo) -> ToolError:
        return ToolError(self._error_text(info))

    def _translate(self, name: str, exc: Exception) -> ToolError:
        """Any failure of a tool as the tool error its caller sees."""
        if isinstance(exc, AtrexError):
            return self._tool_error(exc.info)
        if isinstance(exc, ToolError):
            return self._tool_error(ErrorInfo(stage="input", category="tool_error", message=str(exc)))
        logger.exception("tool %s failed unexpectedly", name)
        return self._tool_error(ErrorInfo(stage="internal", category="unexpected_error",
                                          message=f"The server hit an unexpected error in {name}; the details are in the server's log.",
                                          hint="Retry once; if it persists, report it with the server log."))

    def _finish(self, result: Any) -> Any:
        if isinstance(result, BaseModel):
            return fit_output(result, self.config.max_output_chars)
        return result

    def add_tool(self, fn: Callable[..., Any], *, title: str, read_only: bool, idempotent: bool = False,
                 destructive: bool = False) -> None:
        """Register `fn` (sync or async; its docstring is the description an agent reads) so that
        AtrexError becomes a tool error with stage/category/message/hint, unexpected errors are
        logged and answered without detail, and results are size-capped. A tool
        outside the configured allow-list is not registered at all (so a client cannot call it)."""
        name = fn.__name__
        self.offered.append(name)
        if self.config.tools is not None and name not in self.config.tools:
            return
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def guarded(*args: Any, **kwargs: Any) -> Any:
                try:
                    return self._finish(await fn(*args, **kwargs))
                except Exception as exc:
                    raise self._translate(name, exc) from None
        else:
            @functools.wraps(fn)
            def guarded(*args: Any, **kwargs: Any) -> Any:  # the SDK runs sync tools on a worker thread
                try:
                    return self._finish(fn(*args, **kwargs))
                except Exception as exc:
                    raise self._translate(name, exc) from None

        self.server.add_tool(
            guarded,
            name=name,
            title=title,
            description=inspect.getdoc(fn),
            annotations=ToolAnnotations(title=title, read_only_hint=read_only, destructive_hint=destructive,
                                        idempotent_hint=idempotent, open_world_hint=False),
            structured_output=True,
        )

    async def uniform_errors(self, ctx: Any, call_next: Any) -> Any:
        """Server middleware: the SDK's own tool errors get the stage/category/message/hint form."""
        result = await call_next(ctx)
        if ctx.method == "tools/call" and isinstance(result, dict) and result.get("isError"):
            texts = [c.get("text", "") for c in result.get("content", []) if c.get("type") == "text"]
            info = _sdk_error_info(texts[0], [t.name for t in await self.server.list_tools()]) if texts else None
            if info is not None:
                tool = (ctx.params or {}).get("name", "?")
                shown = tool if tool in {t.name for t in await self.server.list_tools()} else "(unknown)"
                return {**result, "content": [{"type": "text", "text": f"Error executing tool {shown}: {self._error_text(info)}"}]}
        return result

    # ------------------------------------------------------------ services
    @staticmethod
    def service(module: str, name: str | None = None) -> Any:
        """A service module (or one of its functions); a part missing from this installation is
        a clear error, not a crash."""
        found = importlib.util.find_spec(module) is not None
        imported = importlib.import_module(module) if found else None
        if imported is None or (name is not None and not hasattr(imported, name)):
            raise AtrexError("internal", "service_unavailable", f"The service {module}{'.' + name if name else ''} is not available in this installation.",
                             "Update atrex-mcp; the other tools still work.")
        return getattr(imported, name) if name else imported

    def wiki(self) -> Any:
        """The wiki index, opened (and refreshed) on first use."""
        with self._wiki_lock:
            if self._wiki is None:
                self._wiki = self.service("atrex_mcp.wiki.index", "WikiIndex")(state_dir=self.state_dir)
            return self._wiki

    @staticmethod
    def client_id() -> str:
        """Who is calling: over HTTP the identity of the bearer token the request carried (each
        token is one client), otherwise the one client of a stdio server. Runs and profiles
        belong to it (atrex_mcp.runs.store)."""
        token = get_access_token()
        return token.client_id if token is not None and token.client_id else LOCAL_CLIENT

    def candidate_source(self, source: str | None, path: str | None) -> str:
        """The candidate's text from exactly one of `source` or a workspace `path`."""
        if (source is None) == (path is None):
            raise AtrexError("input", "source_or_path", "Give exactly one of `source` (the file's text) or `path` (a file in the workspace).",
                             f"Workspace root: {self.workspace.roots[0]}")
        if source is not None:
            return self.workspace.check_source(source)
        return self.workspace.read_source(path)  # type: ignore[arg-type]

    async def queue(self) -> GpuQueue:
        if self._queue is None:
            devices = self.config.devices or await anyio.to_thread.run_sync(_detect_devices)
            if self._queue is None:
                self._queue = GpuQueue(devices, self.config.correctness_limit)
        return self._queue

    async def has_gpu(self) -> bool:
        if self.config.cluster is not None:
            return await anyio.to_thread.run_sync(self.config.cluster.has_gpu)
        return any(d.startswith("cuda") for d in (await self.queue()).devices)

    async def evaluate(self, mcp_ctx: Context | None, request: Any) -> Any:
        """`atrex_mcp.evaluate.evaluate(request)` through the GPU queue: timed when the request
        times and a GPU exists (a GPU to itself), else a correctness job."""
        kind: JobKind = "timed" if request.timing and await self.has_gpu() else "correctness"
        if self.config.cluster is not None:
            cluster = self.config.cluster
            return await self.run_job(mcp_ctx, kind, f"evaluate {request.op}",
                                      lambda device, progress, cancel: cluster.evaluate(request, progress, cancel))
        evaluate = self.service("atrex_mcp.evaluate", "evaluate")
        return await self.run_job(mcp_ctx, kind, f"evaluate {request.op}",
                                  lambda device, progress, cancel: evaluate(request, self.catalog, progress=progress, cancel=cancel))

    async def run_job(self, mcp_ctx: Context | None, kind: JobKind, label: str,
                      work: Callable[[str, ThreadProgress, threading.Event], T]) -> T:
        """Run `work(device, progress, cancel)` on a worker thread once the queue grants a device
        (with a cluster, at once: the work itself waits for a cluster GPU, whose scheduler
        queues the calls of every server sharing it).

        Progress (queue position, then the work's own) goes to the client. If the call is
        cancelled, `cancel` is set (the evaluator then kills its worker process group) and the
        device is held until the thread has ended, so no timing overlaps a dying job."""
        bridge = _ProgressBridge(mcp_ctx, label)
        if self.config.cluster is not None:
            await bridge.send(f"sent to the cluster at {self.config.cluster.label}")
            return await _run_cancellable(work, "cluster", bridge)

        async def on_position(position: int, waiting: int) -> None:
            await bridge.send(f"queued, position {position} of {waiting} waiting ({'a GPU to itself' if kind == 'timed' else 'a worker slot'})")

        queue = await self.queue()
        async with queue.slot(kind, on_position) as device:
            await bridge.send(f"started on {device}")
            return await _run_cancellable(work, device, bridge)


async def _run_cancellable(work: Callable[[str, ThreadProgress, threading.Event], T], device: str,
                           bridge: _ProgressBridge) -> T:
    """`work` on a worker thread; when the call is cancelled, its cancel flag is set and the
    caller waits (up to CANCEL_GRACE_S) for the thread to end before giving the device back."""
    cancel = threading.Event()
    ended = threading.Event()

    def call() -> T:
        try:
            return work(device, bridge.from_thread, cancel)
        finally:
            ended.set()

    try:
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        cancel.set()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(ended.wait, CANCEL_GRACE_S)
        raise


def _register_tools(app: ServerContext) -> None:
    catalog, policy, config = app.catalog, app.policy, app.config

    def list_problems() -> ProblemList:
        """List the benchmark problems (operators) this server serves, with their number of scored
        shapes and smoke shape. Cheap; call it first. Then get_problem(op) for one problem's files."""
        problems = []
        for name in catalog.names():
            visible = catalog.visible(name)
            problems.append(ProblemSummary(
                name=name,
                scored_shapes=len(visible.scored_shapes),
                smoke_shape=next((s.id for s in visible.shapes if s.smoke), None),
                forward_inputs=_forward_inputs(visible.reference_source),
            ))
        return ProblemList(mode=config.mode, knowledge=app.knowledge, hardware=config.hardware, problems=problems)

    def get_problem(op: OpArg) -> ProblemDetail:
        """Everything needed to write a kernel for one problem: reference.py (the PyTorch Model to
        match), input.py (how inputs are drawn), the shape list, and the output-contract rules.
        In optimize mode each shape also carries its speed-of-light (roofline) figures. Cheap."""
        visible = catalog.visible(op)
        return ProblemDetail(
            name=op,
            mode=config.mode,
            reference_py=visible.reference_source,
            input_py=visible.input_source,
            shapes_json=visible.shapes_json,
            shapes=policy.shapes(visible, config.hardware),
            rules=_contract_rules(),
            allowed_imports=sorted(candidate_contract.ALLOWED_IMPORTS),
        )

    def roofline_lookup(
        flops: Annotated[int, Field(ge=0, description="Your kernel's arithmetic work (FLOPs; integer ops for dtype_path 'int').")] = 0,
        dtype_path: Annotated[DtypePathArg, Field(description="Which peak the work runs at: bf16, fp16, fp8_e4m3, tf32, fp32 or int.")] = "bf16",
        bytes_read: Annotated[int, Field(ge=0, description="Bytes your kernel must read from HBM.")] = 0,
        bytes_written: Annotated[int, Field(ge=0, description="Bytes your kernel must write to HBM.")] = 0,
        hardware: HardwareArg = None,
        op: Annotated[str | None, Field(max_length=128, description="Optimize mode only: look up a problem's own figures instead (with `shape`).")] = None,
        shape: Annotated[str | None, Field(max_length=64, description="Shape id for `op`.")] = None,
    ) -> RooflineResult:
        """Speed-of-light calculator: T_SOL = max(flops / peak[dtype_path], bytes / HBM bandwidth)
        on a hardware profile, with the bound and arithmetic intensity. Works in every mode on
        your own counts. In optimize mode, `op` + `shape` instead return that problem shape's
        figures. Cheap."""
        roofline = app.service("atrex_mcp.problemset.roofline")
        hardware_mod = app.service("atrex_mcp.problemset.hardware")
        profile = hardware_mod.load_profile(hardware or config.hardware)
        if op is not None or shape is not None:
            policy.require_roofline("A problem's roofline figures")
            if op is None or shape is None:
                raise AtrexError("input", "op_and_shape", "Give both `op` and `shape` to look up a problem's figures.")
            visible = catalog.visible(op)
            visible.shape(shape)
            point = policy.shape_figures(op, shape, profile.name)
        else:
            workload = roofline.Workload(flops={dtype_path: flops}, bytes_read=bytes_read, bytes_written=bytes_written)
            point = roofline.roofline_point(workload, profile)
        paths = [p for p, w in point.flops.items() if w]
        return RooflineResult(
            hardware=profile.name,
            flops={k: float(v) for k, v in point.flops.items()},
            bytes=float(point.total_bytes),
            arithmetic_intensity=point.arithmetic_intensity,
            compute_ms=point.compute_ms,
            memory_ms=point.memory_ms,
            t_sol_ms=point.t_sol_ms,
            bound=point.bound,
            peaks={p: profile.peak(p) for p in paths},
            bandwidth=float(profile.hbm_bandwidth.value),
            sources=[f"{p} peak: {profile.peaks[p].source}" for p in paths] + [f"HBM bandwidth: {profile.hbm_bandwidth.source}"],
            problem=op,
            shape=shape,
        )

    def wiki_search(
        query: Annotated[str, Field(min_length=1, max_length=500, description="What you need, in words, e.g. 'row reduction rms norm triton' or 'split-k skinny GEMM'.")],
        category: Annotated[str | None, Field(max_length=64, description="Only this category: hardware, patterns, recipes, pitfalls, profiling, conversion, kernels, source.")] = None,
        dsl: Annotated[str | None, Field(max_length=32, description="Only documents for this language, e.g. 'triton'.")] = None,
        hardware: Annotated[str | None, Field(max_length=32, description="Only documents for this hardware, e.g. 'h200'.")] = None,
        op_family: Annotated[str | None, Field(max_length=64, description=OP_FAMILY_HELP)] = None,
        limit: Annotated[int, Field(ge=1, le=20, description="How many hits to return.")] = 5,
    ) -> WikiSearchResult:
        """Search the GPU optimisation wiki (articles on hardware, patterns, recipes, pitfalls,
        profiling, plus validated Triton reference kernels) by relevance. Returns ids, titles and
        matching snippets; read a whole document with wiki_read. Cheap."""
        hits = app.wiki().search(query, category=category, dsl=dsl, hardware=hardware, op_family=op_family, limit=limit,
                                 withheld=app.withheld)
        return WikiSearchResult(query=query, hits=hits)

    def wiki_read(
        doc_id: Annotated[str, Field(min_length=1, max_length=300, description="A doc_id from wiki_search, e.g. 'docs/patterns/row-reductions'.")],
        offset: Annotated[int, Field(ge=0, description="Character offset to start from, to continue a long document.")] = 0,
        max_chars: Annotated[int, Field(ge=1000, le=40000, description="Most characters of text to return.")] = 20000,
    ) -> WikiReadResult:
        """Read one wiki document in full (front matter, text, sources), or a window of a long one.
        Cheap."""
        doc = app.wiki().read(doc_id, withheld=app.withheld)
        total = len(doc.text)
        window = doc.text[offset: offset + max_chars]
        notes = []
        if offset + max_chars < total:
            notes.append(f"Characters {offset}-{offset + len(window)} of {total} shown; call wiki_read with offset={offset + len(window)} to continue.")
        return WikiReadResult(doc=doc.model_copy(update={"text": window}), notes=notes)

    def package(
        op: OpArg,
        source: SourceArg = None,
        path: PathArg = None,
        out_dir: Annotated[str | None, Field(max_length=4096, description="New or empty folder inside the workspace for the artifact; default 'atrex-package/<op>'.")] = None,
    ) -> PackageOutput:
        """Package a finished kernel: check the output contract (one self-contained file, Model with
        the reference's signature, allow-listed imports, no file/network/process access, a Triton
        kernel really launched) and write <op>.py plus manifest.json (sha256 hashes) into a new or
        empty folder of the workspace. Static check only (nothing runs): validate first. Cheap."""
        package_mod = app.service("atrex_mcp.package")
        text = app.candidate_source(source, path)
        catalog.visible(op)
        target = app.workspace.output_path(out_dir or f"atrex-package/{op}")
        try:
            result = package_mod.package_source(text, op, catalog, target, denied=app.workspace.denied)
        except candidate_contract.ContractRefused as refused:
            package_mod.record_refusal(app.state_dir, op, refused.report)
            raise
        return PackageOutput(**result.model_dump())

    async def validate(
        op: OpArg,
        source: SourceArg = None,
        path: PathArg = None,
        shapes: ShapesArg = None,
        seeds: SeedsArg = 3,
        timing: Annotated[bool, Field(description="Time correct shapes on the GPU (ignored without a GPU).")] = True,
        ctx: Context = None,  # type: ignore[assignment]
    ) -> ValidateResult:
        """Judge a candidate kernel: import it in a sandbox, check each requested shape against the
        reference on fresh random inputs, and (on a GPU) time it and attribute device time to your
        Triton kernels. Per shape: correct or the stage/category/message of the first failure.
        Costs seconds per shape on a GPU; on CPU (Triton interpreter, untimed) large shapes are slow,
        so start with shapes=['smoke']. Also reports the output-contract check that package applies
        (`contract`): a correct kernel that fails it would still be refused by package.
        Sends progress; cancelling the call stops the work."""
        text = app.candidate_source(source, path)
        visible = catalog.visible(op)
        for shape_id in shapes or ():
            visible.shape(shape_id)
        contract = candidate_contract.check_contract(text, visible.reference_source)
        request_type = app.service("atrex_mcp.evaluate.models", "EvalRequest")
        request = request_type(op=op, source=text, shapes=shapes, seeds=seeds, hardware=config.hardware, timing=timing)
        result = policy.validate_result(await app.evaluate(ctx, request))
        return result.model_copy(update={"contract": contract})

    async def profile_kernel(
        op: OpArg,
        source: SourceArg = None,
        path: PathArg = None,
        shape: Annotated[str, Field(max_length=64, description="The one shape id to profile (from get_problem).")] = "smoke",
        run_id: Annotated[str | None, Field(max_length=64, description="Optimisation run this profile belongs to (from start_run), if any.")] = None,
        ctx: Context = None,  # type: ignore[assignment]
    ) -> ProfileResult:
        """Where the time goes for one shape: per-kernel hardware counters of your Triton kernels
        (Nsight Compute on a GPU that has it; otherwise per-kernel device times from torch.profiler,
        marked as the fallback) and the bottleneck they point to (memory, compute, latency, launch).
        The profile is stored: cite its profile_id in a run's plan. Needs a GPU for figures (on CPU
        it only says what it could not measure). Takes a GPU to itself for up to a few minutes;
        sends progress; cancelling stops it."""
        text = app.candidate_source(source, path)
        catalog.visible(op).shape(shape)
        profile = app.service("atrex_mcp.profiling.service", "profile_kernel")
        store = app.service("atrex_mcp.runs.store", "RunStore")(app.state_dir, owner=app.client_id())
        if run_id is not None:
            store.get_run(run_id)  # another client's run is as unknown as a missing one
        kind: JobKind = "timed" if await app.has_gpu() else "correctness"
        if config.cluster is not None:  # profiled on a cluster GPU, stored here with the server's other state
            save = app.service("atrex_mcp.profiling.service", "save_report")

            def on_cluster(device: str, progress: ThreadProgress, cancel: threading.Event) -> Any:
                report = config.cluster.profile(op, text, shape, hardware=config.hardware,
                                                reveal_roofline=not policy.benchmark, progress=progress, cancel=cancel)
                return save(report, store, op=op, shape=shape, source=text, run_id=run_id)

            report = await app.run_job(ctx, kind, f"profile {op}/{shape}", on_cluster)
        else:
            report = await app.run_job(ctx, kind, f"profile {op}/{shape}", lambda device, progress, cancel: profile(
                op, text, shape, catalog, hardware=config.hardware, store=store, run_id=run_id,
                reveal_roofline=not policy.benchmark, progress=progress, cancel=cancel))
        return ProfileResult(**report.model_dump(), mode=config.mode)

    app.add_tool(validate, title="Validate a kernel", read_only=False)
    app.add_tool(profile_kernel, title="Profile a kernel", read_only=False)
    app.add_tool(package, title="Package a kernel", read_only=False)

    for fn, title in ((list_problems, "List problems"), (get_problem, "Get a problem"),
                      (roofline_lookup, "Roofline calculator"), (wiki_search, "Search the GPU wiki"),
                      (wiki_read, "Read a wiki document")):
        if fn in (wiki_search, wiki_read) and app.knowledge == "none":
            app.offered.append(fn.__name__)  # known, but not offered: the condition has no wiki
            continue
        app.add_tool(fn, title=title, read_only=True, idempotent=True)


def _forward_inputs(reference_source: str) -> list[str]:
    """Model.forward's parameter names, read from the reference text without importing it."""
    import ast

    for node in ast.parse(reference_source).body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return [a.arg for a in item.args.args + item.args.kwonlyargs if a.arg != "self"]
    return []


def _contract_rules() -> list[str]:
    return [
        "One self-contained Python file; nothing else travels with it.",
        f"It defines class {candidate_contract.MODEL_CLASS}(torch.nn.Module) whose __init__ and forward take the same "
        "parameters as the reference's.",
        f"Imports only from: {', '.join(sorted(candidate_contract.ALLOWED_IMPORTS))} "
        "(os only to read environment variables: os.environ.get, os.getenv).",
        "No file, network or process access (open, subprocess, socket, torch.load/save, torch.hub, ... are refused), "
        "no eval/exec/__import__, no getattr with a computed name, modules used only through their attributes.",
        "The target DSL is really used: forward launches at least one @triton.jit kernel; time spent in PyTorch or library kernels counts against DSL adoption.",
        "Outputs must match the reference's dtype, shape and structure; inputs must not be modified.",
    ]


WIKI_TOOLS = ("wiki_search", "wiki_read")
RUN_TOOLS_MODULE = "atrex_mcp.runs.tools"  # provides register_run_tools(server, ctx); see docs/DESIGN.md "Server hooks"


def build_server(config: ServerConfig | None = None, *, token_verifier: TokenVerifier | None = None,
                 auth: AuthSettings | None = None) -> MCPServer:
    """A server with every tool registered (the run-memory tools too, when that part is
    installed). `token_verifier` and `auth` are for the HTTP transport (atrex_mcp.server.transport)."""
    config = config or ServerConfig()
    instructions = INSTRUCTIONS if config.knowledge != "none" else INSTRUCTIONS.replace(WIKI_SENTENCE, "")
    server = MCPServer("atrex-mcp", version=__version__, instructions=instructions, token_verifier=token_verifier,
                       auth=auth, log_level=os.environ.get("ATREX_LOG_LEVEL", "INFO"))  # type: ignore[arg-type]
    app = ServerContext(config, server)
    server.middleware.append(app.uniform_errors)
    _register_tools(app)
    if importlib.util.find_spec(RUN_TOOLS_MODULE) is not None:
        importlib.import_module(RUN_TOOLS_MODULE).register_run_tools(server, app)
    unknown = sorted(set(config.tools or ()) - set(app.offered))
    if app.knowledge == "none" and set(config.tools or ()) & set(WIKI_TOOLS):
        raise AtrexError("input", "wiki_disabled", "The allow-list names wiki tools, but the knowledge condition 'none' has no wiki.",
                         "Drop wiki_search/wiki_read from --tools, or choose --knowledge general or full.")
    if unknown:
        raise AtrexError("input", "unknown_tool", f"Unknown tool(s) in the allow-list: {', '.join(unknown)}.",
                         f"Valid choices: {', '.join(sorted(app.offered))}")
    return server
