"""The MCP server: its context and how a tool is registered.

`build_server(config)` returns an `MCPServer` ready for any transport, with the tools of
atrex_mcp.server.tools and atrex_mcp.server.run_tools registered through `ServerContext.add_tool`,
so every tool shares the same error handling, output cap, GPU queue and cancellation. The tools
are module-level functions taking the context first; what each may reveal is atrex_mcp.policy's
decision (each returns one of its views).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import re
import threading
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.lowlevel
from mcp.server import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from atrex_mcp import __version__
from atrex_mcp.errors import AtrexError, ErrorInfo
from atrex_mcp.evaluate.models import EvalRequest, EvalResult
from atrex_mcp.knowledge import Knowledge, default_knowledge, withheld_operators
from atrex_mcp.paths import default_state_dir, problems_dir
from atrex_mcp.policy import Policy
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.runs.store import LOCAL_CLIENT, RunStore
from atrex_mcp.server import run_tools, tools
from atrex_mcp.server.gpu_queue import GpuQueue, JobKind
from atrex_mcp.server.models import ToolSpec
from atrex_mcp.views import Mode, ToolOutput
from atrex_mcp.workspace import DEFAULT_MAX_SOURCE_BYTES, Workspace

if TYPE_CHECKING:  # opened on first use (see ServerContext.wiki)
    from atrex_mcp.wiki.index import WikiIndex

logger = logging.getLogger(__name__)

T = TypeVar("T")
OutputT = TypeVar("OutputT", bound=ToolOutput)
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


_SDK_ARGUMENT_ERROR = re.compile(
    r"^Error executing tool (?P<tool>[\w.-]+): (?P<detail>\d+ validation errors? for .*)", re.S
)
_SDK_UNKNOWN_TOOL = re.compile(r"^Unknown tool: (?P<tool>.*)$", re.S)


_PYDANTIC_DETAIL = re.compile(r"^(?P<message>.*?) \[type=(?P<type>[\w.-]+),.*\]$")
_LOCATION = re.compile(r"^[A-Za-z_][\w]*(?:\.(?:[A-Za-z_]\w*|\d+))*$")


def _without_input(line: str) -> str:
    """One line of a pydantic error without the caller's input: the message keeps its type and
    drops `input_value=…`; a location line that is not plain field names and indices (a caller's
    dict key) is replaced by a placeholder."""
    if m := _PYDANTIC_DETAIL.match(line):
        return f"{m['message']} [type={m['type']}]"
    if (
        line.startswith(" ")
        or line.endswith(("validation error for", "validation errors for"))
        or "validation error" in line
    ):
        return line
    return line if _LOCATION.match(line) and len(line) <= 128 else "<argument>"


def _sdk_error_info(text: str, tools: list[str]) -> ErrorInfo | None:
    """The SDK's own tool errors (arguments that fail the schema, an unknown tool name) in the
    four-field form every other error has; None for errors that already have it."""
    if m := _SDK_ARGUMENT_ERROR.match(text):
        detail = "\n".join(
            _without_input(line) for line in m["detail"].splitlines() if "errors.pydantic.dev" not in line
        )
        return ErrorInfo(
            stage="input",
            category="invalid_arguments",
            message=detail,
            hint=f"Fix the named argument; {m['tool']}'s input schema gives every argument's type, range and default.",
        )
    if m := _SDK_UNKNOWN_TOOL.match(text):
        return ErrorInfo(
            stage="input",
            category="unknown_tool",
            message="Unknown tool.",
            hint=f"Valid choices: {', '.join(sorted(tools))}",
        )
    return None


def _cut(text: str, keep: int) -> str:
    return text[:keep] + f"\n… [truncated by the server: {keep} of {len(text)} characters shown]"


def _left_out(items: list[Any]) -> str:
    """'; left out: ids a, b, …' when every item cut from a list has an id (e.g. a problem's shapes),
    so the caller can ask for exactly those; '' otherwise."""
    ids = [item.get("id") for item in items if isinstance(item, dict)]
    if not ids or len(ids) != len(items) or any(i is None for i in ids):
        return ""
    return f"; left out: ids {', '.join(str(i) for i in ids)}"


def fit_output(model: OutputT, limit: int) -> OutputT:
    """Cut the longest texts (then the longest lists) of a result until its compact JSON fits
    `limit` characters, each text at most once and never the model's `uncut` fields; every cut is
    marked where it happened and listed in `notes`."""
    if len(model.model_dump_json()) <= limit:
        return model
    data = model.model_dump()
    cuts: list[str] = []
    cut_texts: set[str] = set()

    def size(value: Any) -> int:
        return len(json.dumps(value, separators=(",", ":")))

    def leaves(node: Any, kind: type, path: str = "") -> list[tuple[Any, Any, str]]:
        found: list[tuple[Any, Any, str]] = []
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
        for key, value in items:
            where = f"{path}.{key}" if path else str(key)
            if not path and (key == "notes" or key in model.uncut):
                continue
            if isinstance(value, kind):
                found.append((node, key, where))
            found.extend(leaves(value, kind, where))
        return found

    for kind in (str, list):
        while (excess := size(data) - limit) > 0:
            candidates = [
                leaf
                for leaf in leaves(data, kind)
                if leaf[2] not in cut_texts and len(leaf[0][leaf[1]]) > (_MIN_KEPT_CHARS if kind is str else 1)
            ]
            if not candidates:
                break
            container, key, where = max(candidates, key=lambda leaf: size(leaf[0][leaf[1]]))
            value = container[key]
            if kind is str:
                container[key] = _cut(value, max(_MIN_KEPT_CHARS, len(value) - excess - 200))
                cut_texts.add(where)  # its marker keeps it above the minimum: cutting it again never ends
            else:
                kept, dropped = value[: len(value) // 2], value[len(value) // 2 :]
                container[key] = kept
                where = f"{where} (first {len(kept)} of {len(value)} items{_left_out(dropped)})"
            cuts.append(where)
    if cuts and "notes" in data:
        hint = f" {model.truncation_hint}" if model.truncation_hint else ""
        data["notes"].append(
            f"The result exceeded {limit} characters; the server truncated: {', '.join(dict.fromkeys(cuts))}.{hint}"
        )
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
        except Exception:  # noqa: BLE001 - the call was cancelled or the client left: progress has nobody to go to
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
        # Passed to every judge (evaluate.LaunchOptions.state_dir): its sandbox workers treat it as
        # protected, so a --state-dir elsewhere is as unreachable as the default.
        self.state_dir = config.state_dir
        self.workspace = Workspace(
            config.workspaces, denied=[*self.catalog.roots, config.state_dir], max_source_bytes=config.max_source_bytes
        )
        self.run_store = RunStore(config.state_dir)  # every client's runs; a tool sees `runs()`
        self._queue: GpuQueue | None = None
        self._wiki: WikiIndex | None = None
        self._wiki_lock = threading.Lock()
        self.offered: list[str] = []  # every tool name offered for registration, allowed or not
        self._warnings_shown: dict[str, set[str]] = {}  # isolation warnings each client has been shown
        self._warnings_lock = threading.Lock()

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
        return self._tool_error(
            ErrorInfo(
                stage="internal",
                category="unexpected_error",
                message=f"The server hit an unexpected error in {name}; the details are in the server's log.",
                hint="Retry once; if it persists, report it with the server log.",
            )
        )

    def _finish(self, result: Any) -> Any:
        if isinstance(result, ToolOutput):
            return fit_output(result, self.config.max_output_chars)
        return result

    def add_tool(self, spec: ToolSpec) -> None:
        """Register `spec.fn` (sync or async; its first parameter is this context, bound here, so
        the agent sees only the rest; its docstring is the description an agent reads) so that
        AtrexError becomes a tool error with stage/category/message/hint, unexpected errors are
        logged and answered without detail, and results are size-capped. A tool outside the
        configured allow-list is not registered at all (so a client cannot call it)."""
        fn = spec.fn
        name = fn.__name__
        self.offered.append(name)
        if self.config.tools is not None and name not in self.config.tools:
            return
        guarded: Any
        if inspect.iscoroutinefunction(fn):

            async def guarded_async(*args: Any, **kwargs: Any) -> Any:
                try:
                    return self._finish(await fn(self, *args, **kwargs))
                except Exception as exc:  # noqa: BLE001 - every tool failure becomes one structured error
                    raise self._translate(name, exc) from None

            guarded = guarded_async
        else:

            def guarded_sync(*args: Any, **kwargs: Any) -> Any:  # the SDK runs sync tools on a worker thread
                try:
                    return self._finish(fn(self, *args, **kwargs))
                except Exception as exc:  # noqa: BLE001 - every tool failure becomes one structured error
                    raise self._translate(name, exc) from None

            guarded = guarded_sync

        functools.update_wrapper(guarded, fn, updated=())
        del guarded.__wrapped__  # the SDK reads the bound signature below, not the function's
        guarded.__signature__, guarded.__annotations__ = _bound_signature(fn)
        self.server.add_tool(
            guarded,
            name=name,
            title=spec.title,
            description=inspect.getdoc(fn),
            annotations=ToolAnnotations(
                title=spec.title,
                read_only_hint=spec.read_only,
                destructive_hint=False,
                idempotent_hint=spec.idempotent,
                open_world_hint=False,
            ),
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
                return {
                    **result,
                    "content": [{"type": "text", "text": f"Error executing tool {shown}: {self._error_text(info)}"}],
                }
        return result

    # ------------------------------------------------------------ services
    def wiki(self) -> WikiIndex:
        """The wiki index, opened (and refreshed) on first use."""
        # Deferred for start-up time: the index (whoosh) loads only when a tool first needs it.
        from atrex_mcp.wiki.index import WikiIndex

        with self._wiki_lock:
            if self._wiki is None:
                self._wiki = WikiIndex(state_dir=self.state_dir)
            return self._wiki

    def runs(self) -> RunStore:
        """The run memory as the calling client sees it."""
        return self.run_store.scoped(self.client_id())

    @staticmethod
    def client_id() -> str:
        """Who is calling: over HTTP the identity of the bearer token the request carried (each
        token is one client), otherwise the one client of a stdio server. Runs and profiles
        belong to it (atrex_mcp.runs.store)."""
        token = get_access_token()
        return token.client_id if token is not None and token.client_id else LOCAL_CLIENT

    def isolation_warnings_shown(self, warnings: list[str]) -> frozenset[str]:
        """Which of `warnings` the calling client has already been shown (validate leaves those
        out); the rest count as shown from now on. Each is logged once per server, for the operator."""
        with self._warnings_lock:
            logged = set().union(*self._warnings_shown.values())
            for warning in dict.fromkeys(w for w in warnings if w not in logged):
                logger.warning("sandbox isolation: %s (`atrex-mcp doctor` says what to do)", warning)
            shown = self._warnings_shown.setdefault(self.client_id(), set())
            before = frozenset(shown)
            shown.update(warnings)
            return before

    def candidate_source(self, source: str | None, path: str | None) -> str:
        """The candidate's text from exactly one of `source` or a workspace `path`."""
        if (source is None) == (path is None):
            raise AtrexError(
                "input",
                "source_or_path",
                "Give exactly one of `source` (the file's text) or `path` (a file in the workspace).",
                f"Workspace root: {self.workspace.roots[0]}",
            )
        if source is not None:
            return self.workspace.check_source(source)
        return self.workspace.read_source(path)  # type: ignore[arg-type]

    async def queue(self) -> GpuQueue:
        if self._queue is None:
            devices = self.config.devices
            if not devices:
                devices = await anyio.to_thread.run_sync(_detect_devices)
            if self._queue is None:
                self._queue = GpuQueue(devices, self.config.correctness_limit)
        return self._queue

    async def has_gpu(self) -> bool:
        if self.config.cluster is not None:
            return await anyio.to_thread.run_sync(self.config.cluster.has_gpu)
        return any(d.startswith("cuda") for d in (await self.queue()).devices)

    async def evaluate(self, mcp_ctx: Context | None, request: EvalRequest) -> EvalResult:
        """`atrex_mcp.evaluate.evaluate(request)` through the GPU queue: timed when the request
        times and a GPU exists (a GPU to itself), else a correctness job."""
        kind: JobKind = "timed" if request.timing and await self.has_gpu() else "correctness"
        if self.config.cluster is not None:
            cluster = self.config.cluster
            return await self.run_job(
                mcp_ctx,
                kind,
                f"evaluate {request.op}",
                lambda device, progress, cancel: cluster.evaluate(request, progress, cancel),
            )
        # Deferred for start-up time: the evaluator pulls in torch on first use.
        from atrex_mcp.evaluate import LaunchOptions, evaluate

        launch = LaunchOptions(state_dir=self.state_dir)
        return await self.run_job(
            mcp_ctx,
            kind,
            f"evaluate {request.op}",
            lambda device, progress, cancel: evaluate(
                request, self.catalog, progress=progress, cancel=cancel, launch=launch
            ),
        )

    async def run_job(
        self,
        mcp_ctx: Context | None,
        kind: JobKind,
        label: str,
        work: Callable[[str, ThreadProgress, threading.Event], T],
    ) -> T:
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
            await bridge.send(
                f"queued, position {position} of {waiting} waiting "
                f"({'a GPU to itself' if kind == 'timed' else 'a worker slot'})"
            )

        queue = await self.queue()
        async with queue.slot(kind, on_position) as device:
            await bridge.send(f"started on {device}")
            return await _run_cancellable(work, device, bridge)


def _bound_signature(fn: Callable[..., Any]) -> tuple[inspect.Signature, dict[str, Any]]:
    """`fn`'s signature and annotations without its first parameter (the context), with the
    annotations resolved here (the tool modules name ServerContext for type checking only)."""
    hints = typing.get_type_hints(fn, localns={"ServerContext": ServerContext}, include_extras=True)
    _context, *rest = inspect.signature(fn).parameters.values()
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in rest]
    annotations = {p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty}
    if "return" in hints:
        annotations["return"] = hints["return"]
    return inspect.Signature(params, return_annotation=hints.get("return", inspect.Signature.empty)), annotations


async def _run_cancellable(
    work: Callable[[str, ThreadProgress, threading.Event], T], device: str, bridge: _ProgressBridge
) -> T:
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


WIKI_TOOLS = ("wiki_search", "wiki_read")


def build_server(
    config: ServerConfig | None = None, *, token_verifier: TokenVerifier | None = None, auth: AuthSettings | None = None
) -> MCPServer:
    """A server with every tool registered: the problem, judging and wiki tools, then the run
    tools. `token_verifier` and `auth` are for the HTTP transport (atrex_mcp.server.transport)."""
    config = config or ServerConfig()
    instructions = INSTRUCTIONS if config.knowledge != "none" else INSTRUCTIONS.replace(WIKI_SENTENCE, "")
    log_level: Any = os.environ.get("ATREX_LOG_LEVEL", "INFO")  # the SDK checks the level name
    server = MCPServer(
        "atrex-mcp",
        version=__version__,
        instructions=instructions,
        token_verifier=token_verifier,
        auth=auth,
        log_level=log_level,
    )
    app = ServerContext(config, server)
    server.middleware.append(app.uniform_errors)
    for spec in (*tools.TOOLS, *run_tools.RUN_TOOLS):
        if spec.wiki and app.knowledge == "none":
            app.offered.append(spec.fn.__name__)  # known, but not offered: the condition has no wiki
            continue
        app.add_tool(spec)
    unknown = sorted(set(config.tools or ()) - set(app.offered))
    if app.knowledge == "none" and set(config.tools or ()) & set(WIKI_TOOLS):
        raise AtrexError(
            "input",
            "wiki_disabled",
            "The allow-list names wiki tools, but the knowledge condition 'none' has no wiki.",
            "Drop wiki_search/wiki_read from --tools, or choose --knowledge general or full.",
        )
    if unknown:
        raise AtrexError(
            "input",
            "unknown_tool",
            f"Unknown tool(s) in the allow-list: {', '.join(unknown)}.",
            f"Valid choices: {', '.join(sorted(app.offered))}",
        )
    return server
