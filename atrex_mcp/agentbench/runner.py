"""`bench run`: create (or resume) a run and drive the agent over its operators.

Per operator: a fresh workspace holding only the visible files and the prompt, the
benchmark-mode server attached through a per-operator config, the agent started with its
budget, then the package collected and re-checked on the trusted side. Operators run
concurrently with `parallel` > 1 (threads, each waiting on its own agent process).
"""

from __future__ import annotations

import os
import shlex
import shutil
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from atrex_mcp import __version__
from atrex_mcp.agentbench import isolation
from atrex_mcp.agentbench.agents import PROMPT_FILE, AgentTask, driver_for
from atrex_mcp.agentbench.collect import collect_submission
from atrex_mcp.agentbench.endpoint import McpEndpoint, http_server, stdio_endpoint
from atrex_mcp.agentbench.layout import RunLayout, RunStore, now_iso
from atrex_mcp.agentbench.models import AgentSpec, Condition, OpState, RunConfig
from atrex_mcp.agentbench.process import run_agent
from atrex_mcp.agentbench.progress import ProgressBoard
from atrex_mcp.agentbench.prompts import allowed_tools, render_prompt
from atrex_mcp.candidate_contract import DSL_DECORATORS
from atrex_mcp.errors import AtrexError, ErrorInfo
from atrex_mcp.knowledge import Knowledge, default_knowledge
from atrex_mcp.paths import problems_dir
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.problemset.derive import derive_missing

DEFAULTS: dict[str, Any] = {
    "dsl": "triton",
    "condition": "vanilla",
    "budget_minutes": 30.0,
    "hardware": "h200",
    "server": "auto",
    "knowledge": default_knowledge(benchmark=True),
}
VISIBLE = {"reference.py": "reference_source", "input.py": "input_source", "shapes.json": "shapes_json"}


@dataclass
class RunRequest:
    """What the command line asked for; None = not given (the stored value, or the default)."""

    out: Path
    agent: str | None = None
    ops: str | None = None
    dsl: str | None = None
    condition: Condition | None = None
    knowledge: Knowledge | None = None
    model: str | None = None
    budget_minutes: float | None = None
    problems: list[Path] | None = None
    hardware: str | None = None
    server: str | None = None
    agent_uid: str = "auto"
    agent_bin: str | None = None
    agent_args: list[str] = field(default_factory=list)
    agent_env: list[str] = field(default_factory=list)
    name: str | None = None


def parse_agent(
    agent: str, *, binary: str | None, model: str | None, extra_args: list[str], pass_env: list[str]
) -> AgentSpec:
    """`claude`, `codex`, or a command line. A command's arguments that name existing files
    relative to here are made absolute, since the agent runs in its workspace."""
    if agent in ("claude", "codex"):
        kind: Literal["claude", "codex"] = "claude" if agent == "claude" else "codex"
        return AgentSpec(
            kind=kind,
            binary=str(Path(binary).resolve()) if binary else None,
            model=model,
            extra_args=extra_args,
            pass_env=pass_env,
        )
    argv = shlex.split(agent)
    if not argv:
        raise AtrexError(
            "input",
            "empty_agent_command",
            "--agent is empty.",
            'Use claude, codex or a command, e.g. --agent "python3 my_agent.py".',
        )
    resolved = [
        str(Path(a).resolve())
        if not a.startswith("-") and not Path(a).is_absolute() and "/" in a and Path(a).exists()
        else a
        for a in argv
    ]
    return AgentSpec(kind="command", command=resolved, model=model, extra_args=extra_args, pass_env=pass_env)


def _resolve_ops(spec: str, catalog: Catalog) -> list[str]:
    if spec.strip() == "all":
        return catalog.names()
    ops = list(dict.fromkeys(o.strip() for o in spec.split(",") if o.strip()))
    for op in ops:
        catalog.problem_dir(op)  # unknown names fail here with the valid choices
    if not ops:
        raise AtrexError(
            "input",
            "no_operators",
            "--ops names no operator.",
            "Pass all or a comma-separated list, e.g. rms_norm,silu_and_mul.",
        )
    return ops


def _check_resume(config: RunConfig, request: RunRequest) -> None:
    """A resumed run keeps its settings: refuse any option that would change them."""
    differs: list[str] = []
    if request.agent is not None:
        spec = parse_agent(
            request.agent,
            binary=request.agent_bin,
            model=config.agent.model,
            extra_args=config.agent.extra_args,
            pass_env=config.agent.pass_env,
        )
        if (spec.kind, spec.command) != (config.agent.kind, config.agent.command):
            differs.append("--agent")
    budget_s = request.budget_minutes * 60 if request.budget_minutes is not None else None
    for flag, given, stored in (
        ("--dsl", request.dsl, config.dsl),
        ("--condition", request.condition, config.condition),
        ("--knowledge", request.knowledge, config.knowledge),
        ("--model", request.model, config.agent.model),
        ("--hardware", request.hardware, config.hardware),
        ("--budget-minutes", budget_s, config.budget_s),
    ):
        if given is not None and given != stored:
            differs.append(flag)
    if request.ops is not None and _resolve_ops(request.ops, Catalog([Path(p) for p in config.problems])) != config.ops:
        differs.append("--ops")
    if request.problems is not None and [str(p.resolve()) for p in request.problems] != config.problems:
        differs.append("--problems")
    if request.server not in (None, "auto", config.server):
        differs.append("--server")
    if differs:
        raise AtrexError(
            "input",
            "run_settings_differ",
            f"{config.name} already exists with other settings ({', '.join(differs)}).",
            "Resume with the same options (or none), or pass a new --out directory.",
        )
    if os.geteuid() != config.isolation.server_uid:
        raise AtrexError(
            "input",
            "run_owner_differs",
            f"The run was started as uid {config.isolation.server_uid}; this is uid {os.geteuid()}.",
            "Resume it as the same user.",
        )


def open_run(request: RunRequest) -> tuple[RunConfig, RunLayout]:
    """Load the run in `request.out`, or create it from the request."""
    layout = RunLayout(request.out)
    store = RunStore(layout)
    if store.exists():
        config = store.load_config()
        _check_resume(config, request)
        return config, layout
    if request.agent is None or request.ops is None:
        raise AtrexError(
            "input",
            "missing_option",
            "A new run needs --agent and --ops.",
            "e.g. atrex-mcp bench run --agent claude --ops rms_norm,silu_and_mul --out runs/claude-vanilla",
        )
    catalog = Catalog(request.problems) if request.problems else Catalog()
    dsl = request.dsl or DEFAULTS["dsl"]
    if dsl not in DSL_DECORATORS:
        raise AtrexError(
            "input",
            "unknown_dsl",
            f"No output contract for the DSL {dsl!r}.",
            f"Supported: {', '.join(sorted(DSL_DECORATORS))}.",
        )
    ops = _resolve_ops(request.ops, catalog)
    derive_missing(catalog, ops)  # the explicit derive step, once, before any server of the run starts
    spec = parse_agent(
        request.agent,
        binary=request.agent_bin,
        model=request.model,
        extra_args=request.agent_args,
        pass_env=request.agent_env,
    )
    executable = driver_for(spec).executable()
    if executable is None:
        what = spec.command[0] if spec.kind == "command" else spec.kind
        raise AtrexError(
            "input",
            "agent_not_found",
            f"The agent program {what!r} was not found.",
            "Install it, put it on PATH, or pass --agent-bin PATH (claude/codex).",
        )
    identity, warnings = isolation.choose_identity(request.agent_uid, executable)
    transport = isolation.choose_transport(request.server or DEFAULTS["server"], identity)
    checked_roots = list(dict.fromkeys([*catalog.roots, problems_dir()]))
    readable = isolation.accessible_to(identity, isolation.hidden_files(checked_roots, ops))
    config = RunConfig(
        name=request.name or layout.root.name,
        agent=spec,
        ops=ops,
        dsl=dsl,
        condition=request.condition or DEFAULTS["condition"],
        knowledge=request.knowledge or DEFAULTS["knowledge"],
        budget_s=60.0 * (request.budget_minutes if request.budget_minutes is not None else DEFAULTS["budget_minutes"]),
        problems=[str(r) for r in catalog.roots],
        hardware=request.hardware or DEFAULTS["hardware"],
        server=transport,
        isolation=isolation.describe(identity, transport, readable, warnings),
        created_at=now_iso(),
        atrex_mcp_version=__version__,
    )
    _make_dirs(layout, identity)
    store.save_config(config)
    return config, layout


def _make_dirs(layout: RunLayout, identity: isolation.AgentIdentity) -> None:
    """Trusted directories private to this user; the agents' area only traversable."""
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.ops_dir.mkdir(exist_ok=True)
    layout.ops_dir.chmod(0o700)
    layout.agents_dir.mkdir(exist_ok=True)
    if identity.switched:
        layout.root.chmod(0o711)
        layout.agents_dir.chmod(0o711)
        if not isolation.accessible_to(identity, [layout.agents_dir], "-x"):
            raise AtrexError(
                "input",
                "workspace_unreachable",
                f"uid {identity.uid} cannot reach {layout.agents_dir} (a parent directory is closed to it).",
                "Put --out where that uid can traverse (e.g. under /tmp or /srv), or pass --agent-uid same (weaker).",
            )


@dataclass
class RunSummary:
    states: dict[str, OpState]
    interrupted: bool

    def counts(self) -> Counter:
        return Counter(
            (s.submission.outcome if s.status == "done" and s.submission else s.status) for s in self.states.values()
        )

    def line(self) -> str:
        counts = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(self.counts().items()))
        return f"{len(self.states)} operator(s): {counts}" + (
            " (interrupted: run again to continue)" if self.interrupted else ""
        )


class BenchRunner:
    """Runs the operators of one run that are not done yet."""

    def __init__(
        self,
        config: RunConfig,
        layout: RunLayout,
        *,
        parallel: int = 1,
        stream: TextIO | None = None,
        live: bool | None = None,
    ):
        self.config = config
        self.layout = layout
        self.store = RunStore(layout)
        self.parallel = max(1, parallel)
        self.catalog = Catalog([Path(p) for p in config.problems])
        self.driver = driver_for(config.agent)
        self.identity = isolation.AgentIdentity(config.isolation.agent_uid, config.isolation.agent_gid)
        self.cancel = threading.Event()
        self.board = ProgressBoard(f"bench run {config.name}", len(config.ops), stream=stream, live=live)

    # ------------------------------------------------------------ scheduling
    def run(self) -> RunSummary:
        states = self.store.states(self.config.ops)
        todo = [op for op in self.config.ops if states[op].status != "done"]
        self.board.begin(already_done=len(self.config.ops) - len(todo))
        for warning in self.config.isolation.warnings:
            self.board.note(f"isolation warning: {warning}")
        interrupted = False
        with ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="bench-op") as pool:
            futures: set[Future] = {pool.submit(self.run_operator, op) for op in todo}
            try:
                while futures:
                    done, futures = wait(futures, timeout=0.5, return_when=FIRST_COMPLETED)
                    for future in done:
                        future.result()
            except KeyboardInterrupt:
                interrupted = True
                self.cancel.set()
                wait(futures)
        summary = RunSummary(self.store.states(self.config.ops), interrupted or self.cancel.is_set())
        self.board.close(summary.line())
        return summary

    # ------------------------------------------------------------ one operator
    def run_operator(self, op: str) -> OpState:
        if self.cancel.is_set():
            return self.store.load_state(op)
        previous = self.store.load_state(op)
        state = OpState(
            op=op, status="running", attempts=previous.attempts + 1, started_at=now_iso(), agent_uid=self.identity.uid
        )
        self.store.save_state(state)
        self.board.stage(op, "preparing workspace")
        try:
            workspace, home, prompt = self._prepare(op)
            with self._endpoint(op, workspace) as endpoint:
                task = AgentTask(
                    op=op,
                    prompt=prompt,
                    workspace=workspace,
                    home=home,
                    endpoint=endpoint,
                    tools=allowed_tools(self.config.condition, self.config.knowledge),
                    budget_s=self.config.budget_s,
                    condition=self.config.condition,
                    dsl=self.config.dsl,
                )
                executable = self.driver.executable()
                if executable is None:
                    raise AtrexError(
                        "input",
                        "agent_not_found",
                        f"The agent program for {self.config.agent.kind} is no longer found.",
                    )
                invocation = self.driver.invocation(task, executable)
                for path, text in invocation.files.items():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)
                isolation.hand_over(task.home, self.identity)
                self.board.stage(op, "agent started")
                finished = run_agent(
                    invocation.argv,
                    cwd=task.workspace,
                    env=invocation.env,
                    identity=self.identity,
                    budget_s=self.config.budget_s,
                    transcript=self.layout.transcript(op),
                    stderr_log=self.layout.agent_log(op),
                    cancel=self.cancel,
                    on_line=lambda line: self._on_line(op, line),
                )
            state.elapsed_s, state.exit_code, state.timed_out = (
                finished.elapsed_s,
                finished.exit_code,
                finished.timed_out,
            )
            state.usage = self.driver.usage(self.layout.transcript(op))
            if finished.cancelled:
                state.status = "interrupted"
            else:
                self.board.stage(op, "collecting the submission")
                state.submission = collect_submission(
                    workspace,
                    op,
                    self.catalog,
                    self.layout.submission_dir(op),
                    self.layout.root,
                    self.config.dsl,
                    self.layout.server_state(op),
                )
                state.status = "done"
        except AtrexError as exc:
            state.status, state.error = "error", exc.info
        except OSError as exc:  # the agent could not be started, a directory could not be written
            state.status = "error"
            state.error = ErrorInfo(
                stage="internal",
                category="agent_start_failed",
                message=f"{type(exc).__name__}: {exc}",
                hint=f"See {self.layout.agent_log(op)}.",
            )
        state.finished_at = now_iso()
        self.store.save_state(state)
        self.board.finish(op, self._verdict(state), counted=state.status == "done")
        return state

    def _prepare(self, op: str) -> tuple[Path, Path, str]:
        """A fresh workspace (visible files + PROMPT.md) and HOME, owned by the agent's uid:
        (workspace, home, prompt)."""
        layout, config = self.layout, self.config
        for path in (layout.workspace(op).parent, layout.server_state(op), layout.submission_dir(op)):
            if path.exists():
                shutil.rmtree(path)
        layout.op_dir(op).mkdir(parents=True, exist_ok=True)
        workspace, home = layout.workspace(op), layout.agent_home(op)
        workspace.mkdir(parents=True)
        (home / "tmp").mkdir(parents=True)
        if self.identity.switched:
            workspace.parent.chmod(0o711)
        visible = self.catalog.visible(op)
        for name, attribute in VISIBLE.items():
            (workspace / name).write_text(getattr(visible, attribute))
        prompt = render_prompt(config.condition, op, config.dsl, config.budget_s, config.knowledge)
        (workspace / PROMPT_FILE).write_text(prompt)
        layout.prompt_file(op).write_text(prompt)
        isolation.hand_over(workspace, self.identity)
        return workspace, home, prompt

    @contextmanager
    def _endpoint(self, op: str, workspace: Path) -> Iterator[McpEndpoint]:
        state_dir = self.layout.server_state(op)
        state_dir.mkdir(parents=True, exist_ok=True)
        if self.config.server == "stdio":
            yield stdio_endpoint(self.config, workspace, state_dir)
            return
        self.board.stage(op, "starting the MCP server")
        with http_server(self.config, workspace, state_dir, self.layout.server_log(op)) as endpoint:
            yield endpoint

    def _on_line(self, op: str, line: str) -> None:
        text = self.driver.describe(line)
        if text:
            self.board.stage(op, f"agent: {text}")

    @staticmethod
    def _verdict(state: OpState) -> str:
        if state.status == "error" and state.error:
            return f"error: {state.error.category}: {state.error.message[:200]}"
        if state.status != "done" or state.submission is None:
            return state.status
        text = state.submission.outcome.replace("_", " ")
        if state.submission.outcome == "contract_failed" and state.submission.violations:
            text += f": {state.submission.violations[0]}"
        return text + (" (budget reached)" if state.timed_out else "")
