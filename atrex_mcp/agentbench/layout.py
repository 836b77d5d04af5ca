"""Where everything of a run lives in RUN_DIR, and the run's persistent state.

State is one small JSON file per operator, replaced atomically, so an interrupted run (Ctrl-C,
a crash, a lost machine) loses at most the operators that were in flight; `bench run` on the
same directory continues with every operator not `done`.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from pydantic import ValidationError

from atrex_mcp.agentbench.models import OpState, RunConfig
from atrex_mcp.atomic_json import write_json_atomic
from atrex_mcp.errors import AtrexError
from atrex_mcp.runs.store import now_iso

__all__ = ["RunLayout", "RunStore", "now_iso"]

RUN_FILE = "run.json"
STATE_FILE = "state.json"


class RunLayout:
    """Paths inside one run directory."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()

    @property
    def run_file(self) -> Path:
        return self.root / RUN_FILE

    @property
    def ops_dir(self) -> Path:
        """Trusted side only (mode 0700): states, transcripts, server logs, submissions."""
        return self.root / "ops"

    def op_dir(self, op: str) -> Path:
        return self.ops_dir / op

    def state_file(self, op: str) -> Path:
        return self.op_dir(op) / STATE_FILE

    def prompt_file(self, op: str) -> Path:
        return self.op_dir(op) / "prompt.md"

    def transcript(self, op: str) -> Path:
        """The agent's stdout as it came (JSON lines for claude and codex)."""
        return self.op_dir(op) / "transcript.log"

    def agent_log(self, op: str) -> Path:
        return self.op_dir(op) / "agent.stderr.log"

    def server_log(self, op: str) -> Path:
        return self.op_dir(op) / "server.log"

    def server_state(self, op: str) -> Path:
        return self.op_dir(op) / "server-state"

    def submission_dir(self, op: str) -> Path:
        return self.op_dir(op) / "submission"

    @property
    def agents_dir(self) -> Path:
        return self.root / "agents"

    def workspace(self, op: str) -> Path:
        return self.agents_dir / op / "work"

    def agent_home(self, op: str) -> Path:
        return self.agents_dir / op / "home"

    @property
    def eval_dir(self) -> Path:
        return self.root / "eval"

    @property
    def baselines_dir(self) -> Path:
        return self.eval_dir / "baselines"

    @property
    def report_dir(self) -> Path:
        return self.root / "report"


class RunStore:
    """Reads and writes run.json and the per-operator states (thread-safe)."""

    def __init__(self, layout: RunLayout):
        self.layout = layout
        self._lock = threading.Lock()

    def exists(self) -> bool:
        return self.layout.run_file.is_file()

    def load_config(self) -> RunConfig:
        path = self.layout.run_file
        try:
            return RunConfig.model_validate_json(path.read_text())
        except FileNotFoundError:
            raise AtrexError(
                "input",
                "not_a_run",
                f"{self.layout.root} has no {RUN_FILE}: it is not a bench run directory.",
                "Pass the --out directory of a `bench run`.",
            ) from None
        except (ValidationError, ValueError) as exc:
            raise AtrexError("input", "bad_run_file", f"{path} is not a valid run file: {exc}") from None

    def save_config(self, config: RunConfig) -> None:
        write_json_atomic(self.layout.run_file, config)

    def load_state(self, op: str) -> OpState:
        path = self.layout.state_file(op)
        try:
            return OpState.model_validate(json.loads(path.read_text()))
        except FileNotFoundError:
            return OpState(op=op)
        except (ValidationError, ValueError) as exc:
            raise AtrexError(
                "internal", "bad_state_file", f"{path} is damaged: {exc}", f"Delete {path} to run {op} again."
            ) from None

    def save_state(self, state: OpState) -> None:
        with self._lock:
            write_json_atomic(self.layout.state_file(state.op), state)

    def states(self, ops: list[str]) -> dict[str, OpState]:
        return {op: self.load_state(op) for op in ops}
