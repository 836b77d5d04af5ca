"""One candidate's worker across an evaluation: started once and reused across shapes,
restarted after any fault (crash, timeout, CUDA error, out-of-memory), killed at the end.

Every reply is turned into data with a stable failure category here; the worker's own words
pass through the leak guard before they reach a result.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate import taxonomy as tx
from atrex_mcp.evaluate.leakguard import LeakGuard
from atrex_mcp.evaluate.models import Isolation, Overhead
from atrex_mcp.evaluate.standby import Spare
from atrex_mcp.evaluate.transfer import OutputArena
from sandbox.launcher import Cancelled, LaunchSpec, PendingReply, Worker, WorkerDied, WorkerTimeout
from sandbox.messages import InitRequest, LoadRequest, PingRequest, Request

# Faults after which the worker's state (CUDA context, heap) is no longer trusted.
_RESTART_AFTER = frozenset({tx.CRASH, tx.TIMEOUT, tx.CUDA_FAULT, tx.OOM, tx.OVER_TIME_BUDGET, tx.COMPILE_TIMEOUT})


@dataclass
class Failure:
    """A classified failure of one request."""

    stage: str
    category: str
    message: str


def classify(error: dict[str, Any]) -> tuple[str, str]:
    """(stage, category) for an exception the worker reported. The worker may name only compile
    and runtime categories: correctness and performance verdicts (and not_run) are the trusted
    side's, so a claimed `harness_oom` or `numeric_mismatch` is read as the exception it is."""
    stage, category = error.get("stage"), error.get("category")
    if stage in tx.WORKER_STAGES and category in tx.CATEGORIES[stage]:
        return stage, category
    kind, message = str(error.get("type", "")), str(error.get("message", ""))
    lowered = message.lower()
    if (
        "OutOfMemoryError" in kind
        or kind == "builtins.MemoryError"
        or "out of memory" in lowered
        or "can't allocate memory" in lowered
    ):
        return tx.RUNTIME, tx.OOM
    if kind.startswith("triton.") and "CompilationError" in kind:
        return tx.COMPILE, tx.KERNEL_COMPILE_ERROR
    if (
        "AcceleratorError" in kind
        or "cuda error" in lowered
        or "illegal memory access" in lowered
        or "device-side assert" in lowered
        or "cudaerror" in lowered
        or "misaligned address" in lowered
    ):
        return tx.RUNTIME, tx.CUDA_FAULT
    return tx.RUNTIME, tx.EXCEPTION


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the worker stopped answering"
    if code < 0:
        try:
            return f"the worker was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"the worker was killed by signal {-code}"
    return f"the worker exited with status {code}"


class Session:
    """The workers of one evaluation, started one after another as faults require, and the output
    arena (evaluate.transfer) they all inherit; `stop` ends both."""

    def __init__(
        self,
        spec: LaunchSpec,
        init: InitRequest,
        load: LoadRequest,
        guard: LeakGuard,
        compile_timeout_s: float,
        cancel: threading.Event | None,
        spare: Spare | None = None,
        defines_model: bool = True,
    ):
        """`spare`: a worker spawned ahead in `spec.scratch` (evaluate.standby), with its arena;
        the first start uses it instead of spawning one. `defines_model`: what the judge found in
        the candidate's source itself (`source_defines_model`); a load the worker reports as ok
        without it is not believed."""
        self.arena = spare.arena if spare is not None else OutputArena(cuda=spec.device == "cuda")
        self.spec = dataclasses.replace(spec, output_fd=self.arena.fd)
        self._spawned = spare.worker if spare is not None else None
        self.init, self.load, self.guard = init, load, guard
        self.compile_timeout_s = compile_timeout_s
        self.cancel = cancel
        self.worker: Worker | None = None
        self.isolation = Isolation()
        self.overhead = Overhead()
        self.versions: dict[str, Any] = {}
        self.worker_device: dict[str, Any] = {}
        self.leaked = False
        self.defines_model = defines_model
        self._strays = 0  # reply frames of workers already replaced
        self._memory_peak: int | None = None  # the most host memory any ended worker's cgroup held
        self.last_call_s = 0.0  # the worker's wall on the last call: from its send to its reply's arrival
        self.trusted_round_trip_s: float | None = None  # the fastest ping this worker answered before the import

    def _note_memory_peak(self) -> None:
        peak = self.worker.memory_peak_bytes if self.worker is not None else None
        if peak is not None:
            self._memory_peak = max(peak, self._memory_peak or 0)

    def _poll(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled()

    def text(self, value: str) -> str:
        scrubbed, leaked = self.guard.scrub(value)
        self.leaked |= leaked
        return scrubbed

    def _failure(self, error: dict[str, Any]) -> Failure:
        stage, category = classify(error)
        detail = error.get("message", "")
        if error.get("traceback") and category in (
            tx.EXCEPTION,
            tx.IMPORT_ERROR,
            tx.KERNEL_COMPILE_ERROR,
            tx.CUDA_FAULT,
        ):
            detail = f"{error.get('type', '')}: {detail}\n{error['traceback']}"
        return Failure(stage, category, self.text(detail))

    def start(self, first: bool) -> Failure | None:
        """Start a worker and load the candidate; a Failure means it did not compile/load.
        A worker that cannot even start (before any candidate code ran) is the evaluator's
        failure, not the candidate's: the first time it raises an internal AtrexError."""
        t0 = time.perf_counter()
        if self.worker is not None:
            self._strays += self.worker.stray_frames
            self._note_memory_peak()
        self.worker, self._spawned = self._spawned or Worker(self.spec), None
        problem = ""
        try:
            reply = self.worker.start(self.init, poll=self._poll)
            if not reply.get("ok"):
                problem = str(reply.get("error"))
        except (WorkerDied, WorkerTimeout) as exc:
            problem = f"{exc}\n{exc.log_tail[-1500:] if isinstance(exc, WorkerDied) else ''}"
        if problem:
            self.worker.kill()
            message = self.text(f"The sandbox worker failed to start: {problem}")
            if first:
                raise AtrexError(
                    "internal",
                    "sandbox_start_failed",
                    message,
                    "Check the isolation warnings; ATREX_SANDBOX_LANDLOCK=0 tells a Landlock problem from others.",
                )
            return Failure(tx.RUNTIME, tx.CRASH, message)
        self._record_isolation(reply)
        trip = fastest_ping(self, self.compile_timeout_s)  # answered by the harness alone: no candidate yet
        self.trusted_round_trip_s = None if isinstance(trip, Failure) else trip  # a failure: the load finds out why
        if first:
            self.overhead.worker_start_s = reply["start_s"]
            self.overhead.spawned_ahead_s = reply["spawned_ahead_s"]
            self.overhead.cuda_init_s = reply.get("cuda_init_s", 0.0)
        failure = self.request_load()
        if first:
            self.overhead.candidate_load_s = time.perf_counter() - t0 - reply["start_s"]
        else:
            self.overhead.restarts += 1
            self.overhead.restart_s += time.perf_counter() - t0
        return failure

    def request_load(self) -> Failure | None:
        """Import the candidate; every failure here is a compile-stage failure."""
        outcome = self.call(self.load, self.compile_timeout_s, timeout_category=tx.COMPILE_TIMEOUT)
        if not isinstance(outcome, Failure):
            if self.defines_model:
                return None
            outcome = Failure(
                tx.COMPILE,
                tx.NO_MODEL,
                "The worker reported the candidate loaded, but its source "
                "defines no `Model` (a class, assignment or import of that name).",
            )
            assert self.worker is not None  # the call above ran in it
            self.worker.kill()  # whatever loaded there is not the file the judge was given
            return outcome
        if outcome.category == tx.OOM:
            outcome.category = tx.COMPILE_OOM
        elif outcome.category not in tx.CATEGORIES[tx.COMPILE]:
            outcome.category = tx.IMPORT_ERROR  # e.g. the import crashed the process
        outcome.stage = tx.COMPILE
        return outcome

    def _record_isolation(self, reply: dict[str, Any]) -> None:
        report = reply.get("isolation") or {}
        ll = report.get("landlock") or {}
        plan = self.worker.plan if self.worker else {}
        self.isolation = Isolation(
            uid=report.get("uid"),
            pid_namespace=bool(plan.get("pid_namespace")),
            mount_namespace=bool(plan.get("mount_namespace")),
            landlock_abi=ll.get("abi", 0),
            landlock_enforced=bool(ll.get("enforced")),
            landlock_handles=list(ll.get("handles", [])),
            capabilities_dropped=bool(report.get("capabilities_dropped")),
            rlimits=dict(report.get("rlimits", {})),
            seccomp_enforced=bool((report.get("seccomp") or {}).get("enforced")),
            network_namespace=bool(plan.get("net_namespace")),
            task_limit=report.get("task_limit"),
            scratch_bytes=(
                self.worker.spec.scratch_bytes
                if self.worker
                and (plan.get("scratch_quota") or plan.get("scratch_watchdog"))
                and not self.worker.spec.wrapper
                else None
            ),
            memory_cap_bytes=self.worker.memory_cap_bytes if self.worker else None,
            warnings=[*plan.get("notes", []), *report.get("warnings", [])],
        )
        self.versions = reply.get("versions", {})
        self.worker_device = reply.get("device", {})

    @property
    def forged(self) -> bool:
        """Whether any worker of this session wrote a reply frame that answered no request (a
        forgery: the honest worker answers each request once, with its nonce)."""
        return self._strays + (self.worker.stray_frames if self.worker is not None else 0) > 0

    @property
    def alive(self) -> bool:
        return self.worker is not None and self.worker.alive

    def ensure(self) -> Failure | None:
        """A live worker with the candidate loaded, restarting if the last one faulted."""
        if self.alive:
            return None
        if self.worker is not None:
            self.worker.kill()
        failure = self.start(first=False)
        if failure is not None:
            return Failure(tx.RUNTIME, tx.CRASH, f"The worker could not be restarted after a fault: {failure.message}")
        return None

    def call(
        self,
        request: Request,
        timeout_s: float,
        timeout_category: str = tx.TIMEOUT,
        meanwhile: Callable[[], object] | None = None,
    ) -> dict[str, Any] | Failure:
        """One request: the reply (the worker's claims, shaped as sandbox.messages.REPLIES says
        for an honest one), or a classified Failure (the worker is killed when it faulted).
        `last_call_s` is then the worker's wall on it, from the send to the reply's arrival.

        `meanwhile`: the judge's own work, run once the request is sent and before its reply is
        read, while the worker runs. Its time is not the worker's: the timeout counts from the
        send (sandbox.launcher.PendingReply), and the reply's arrival is noted while it runs. If
        it raises an Exception, the reply is still awaited and classified (a faulted worker
        killed, as after any call) before the exception propagates, so no reply is left unread
        and the worker is in a known state; an interrupt that is no Exception kills the worker."""
        assert self.worker is not None
        pending = self.worker.send(request, timeout_s, watch=meanwhile is not None)
        if meanwhile is not None:
            try:
                meanwhile()
            except Exception:
                self._reply(pending, timeout_s, timeout_category)
                raise
            except BaseException:
                pending.abandon()
                raise
        return self._reply(pending, timeout_s, timeout_category)

    def _reply(self, pending: PendingReply, timeout_s: float, timeout_category: str) -> dict[str, Any] | Failure:
        """The reply to `pending` as data, or its failure classified (Session.call)."""
        assert self.worker is not None
        try:
            reply = pending.wait(poll=self._poll)
        except WorkerTimeout:
            stage = (
                tx.COMPILE
                if timeout_category == tx.COMPILE_TIMEOUT
                else (tx.PERFORMANCE if timeout_category == tx.OVER_TIME_BUDGET else tx.RUNTIME)
            )
            return Failure(
                stage, timeout_category, f"No answer within {timeout_s:.0f} s; the worker's process group was killed."
            )
        except WorkerDied as exc:
            why = exc.reason or _describe_exit(exc.returncode)
            category = tx.OOM if exc.out_of_memory else tx.CRASH
            return Failure(tx.RUNTIME, category, self.text(f"{why}.\n{exc.log_tail[-1500:]}".strip()))
        finally:
            self.last_call_s = pending.seconds
        if reply.get("ok"):
            return reply
        failure = self._failure(reply.get("error") or {})
        if failure.category in _RESTART_AFTER:
            self.worker.kill()
        return failure

    def stop(self) -> None:
        for worker in (self.worker, self._spawned):
            if worker is not None:
                worker.stop()
        self._note_memory_peak()
        self.isolation.memory_peak_bytes = self._memory_peak
        self.arena.close()


PINGS = 3


def fastest_ping(session: Any, timeout_s: float) -> float | Failure:
    """The fastest of PINGS empty requests to `session`'s worker and back (anything with
    Session.call), or the Failure of the first that failed."""
    walls = []
    for _ in range(PINGS):
        t0 = time.perf_counter()
        pong = session.call(PingRequest(), timeout_s)
        walls.append(time.perf_counter() - t0)
        if isinstance(pong, Failure):
            return pong
    return min(walls)


def protected_roots(catalog_roots: list[Path], state_dir: Path | None = None) -> list[Path]:
    """Everything the worker must not read: problem sets (hidden files), the package's own
    data, the state directory (the one given, else the default one: paths.default_state_dir)."""
    from atrex_mcp import paths

    roots = [*catalog_roots, Path(paths.__file__).resolve().parent, state_dir or paths.default_state_dir()]
    return [Path(os.path.realpath(r)) for r in roots]


def source_defines_model(source: str) -> bool:
    """Whether the candidate's source itself binds the name `Model` (a class, an assignment or an
    import, at any depth): the judge's own check behind the worker's `load ok`. A file that
    does not parse is left to the worker, which reports the syntax error."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return True  # the worker reports the syntax error itself; nothing to second-guess here
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            return True
        if isinstance(node, ast.Name) and node.id == "Model" and isinstance(node.ctx, ast.Store):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == "Model" for a in node.names):
            return True
    return False
