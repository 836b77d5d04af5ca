"""Running one agent process: in its workspace, as its uid, in a process group of its own,
stopped at the budget or on cancel (the whole group: the CLI, the server it started, any
shell it spawned), its stdout saved line by line as the transcript."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from atrex_mcp.agentbench.isolation import AgentIdentity

TERM_GRACE_S = 5.0
MAX_TRANSCRIPT_BYTES = 256 * 1024 * 1024
_POLL_S = 0.2


@dataclass
class AgentExit:
    exit_code: int | None
    timed_out: bool
    cancelled: bool
    elapsed_s: float


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop_group(proc: subprocess.Popen) -> None:
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def run_agent(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    identity: AgentIdentity,
    budget_s: float,
    transcript: Path,
    stderr_log: Path,
    cancel: threading.Event,
    on_line: Callable[[str], None] = lambda line: None,
) -> AgentExit:
    """Run the agent to its end, its budget, or `cancel`; `on_line` sees each stdout line."""
    transcript.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(transcript, "wb") as out, open(stderr_log, "wb") as err:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
            **identity.popen_kwargs(),
        )

        def pump() -> None:
            written = 0
            assert proc.stdout is not None
            for raw in proc.stdout:
                if written < MAX_TRANSCRIPT_BYTES:
                    out.write(raw)
                    out.flush()
                    written += len(raw)
                try:
                    on_line(raw.decode(errors="replace"))
                except Exception:  # noqa: BLE001 - a display problem must never stop the transcript
                    pass

        reader = threading.Thread(target=pump, name=f"transcript-{proc.pid}", daemon=True)
        reader.start()
        timed_out = cancelled = False
        deadline = started + budget_s
        while proc.poll() is None:
            if cancel.wait(_POLL_S):
                cancelled = True
            elif time.monotonic() >= deadline:
                timed_out = True
            if cancelled or timed_out:
                _stop_group(proc)
                break
        _signal_group(proc.pid, signal.SIGKILL)  # whatever the agent left running in its group
        reader.join(TERM_GRACE_S)
    return AgentExit(
        exit_code=proc.returncode,
        timed_out=timed_out,
        cancelled=cancelled,
        elapsed_s=round(time.monotonic() - started, 3),
    )
