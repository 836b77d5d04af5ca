"""The server over loopback HTTP with a token, and (as root) the agent as uid 65534: it reaches
its workspace and the server, but not the evaluator-only files or the run's trusted side."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from atrex_mcp.agentbench.layout import RunLayout, RunStore
from atrex_mcp.agentbench.runner import BenchRunner, RunRequest, open_run
from atrex_mcp.paths import problems_dir

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_scripted_agent_over_http_with_a_token_in_the_optimizer_condition(tmp_path):
    """Without --kernels the scripted agent takes the kernel from the wiki, a tool only the
    optimizer condition allows, and only the full knowledge condition hands a served operator's
    kernel out (general, the default, withholds it)."""
    agent = f"{sys.executable} {ROOT / 'examples' / 'bench_scripted_agent.py'}"
    config, layout = open_run(
        RunRequest(
            out=tmp_path / "run",
            agent=agent,
            ops="rms_norm",
            server="http",
            agent_uid="same",
            condition="optimizer",
            knowledge="full",
            budget_minutes=4,
        )
    )
    summary = BenchRunner(config, layout, live=False).run()
    state = summary.states["rms_norm"]
    assert config.server == "http" and state.submission.outcome == "submitted", state
    transcript = layout.transcript("rms_norm").read_text()
    assert "wiki_search: found kernels/rms_norm" in transcript and "validate: 1 passed" in transcript
    assert "measure-revise loop" in layout.prompt_file("rms_norm").read_text()
    log = layout.server_log("rms_norm").read_text()
    assert "127.0.0.1" in log
    env_file = json.loads((layout.agent_home("rms_norm") / "mcp.json").read_text())["mcpServers"]["atrex"]
    assert env_file["type"] == "http" and env_file["headers"]["Authorization"].startswith("Bearer ")


PROBE = r"""
id -u
for f in "$PRIVATE_HIDDEN" "$RUN_STATE"; do
  if cat "$f" >/dev/null 2>&1; then echo "READ $f"; else echo "DENIED $f"; fi
done
ls "$ATREX_WORKSPACE" | tr '\n' ' '; echo
touch "$ATREX_WORKSPACE/agent-was-here" && echo "WROTE workspace"
echo "transport=$ATREX_MCP_TRANSPORT"
port=${ATREX_MCP_URL#http://127.0.0.1:}; port=${port%%/*}
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'GET /mcp HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
head -1 <&3
"""


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="running the agent as another uid needs root (CI runs unprivileged)")
@pytest.mark.skipif(not Path("/bin/bash").exists(), reason="the probe agent is a bash script")
def test_agent_of_another_uid_reaches_only_its_workspace_and_the_server(monkeypatch):
    base = Path(tempfile.mkdtemp(prefix="atrex-bench-iso-"))
    try:
        base.chmod(0o711)  # the agent's uid must be able to traverse to its workspace
        private = base / "problems"  # a private copy of the problem set: unreadable to the agent's uid
        shutil.copytree(problems_dir() / "rms_norm", private / "rms_norm", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(problems_dir() / "weights.json", private / "weights.json")
        private.chmod(0o700)
        run = base / "run"
        probe = base / "probe.sh"
        probe.write_text(PROBE)
        probe.chmod(0o644)
        monkeypatch.setenv("PRIVATE_HIDDEN", str(private / "rms_norm" / "roofline.json"))
        monkeypatch.setenv("RUN_STATE", str(run / "ops" / "rms_norm" / "state.json"))
        config, layout = open_run(
            RunRequest(
                out=run,
                agent=f"/bin/bash {probe}",
                ops="rms_norm",
                problems=[private],
                budget_minutes=2,
                agent_env=["PRIVATE_HIDDEN", "RUN_STATE"],
            )
        )
        assert config.isolation.agent_uid == 65534 and config.server == "http"
        assert not [p for p in config.isolation.hidden_readable if p.startswith(str(private))]
        state = BenchRunner(config, layout, live=False).run().states["rms_norm"]
        assert state.status == "done" and state.agent_uid == 65534 and state.submission.outcome == "no_submission"
        lines = layout.transcript("rms_norm").read_text().splitlines()
        assert lines[0] == "65534"
        assert (
            f"DENIED {private / 'rms_norm' / 'roofline.json'}" in lines
            and f"DENIED {layout.state_file('rms_norm')}" in lines
        )
        assert "PROMPT.md input.py reference.py shapes.json" in lines[3] and "WROTE workspace" in lines
        assert "transport=http" in lines and lines[-1].startswith("HTTP/1.1 401"), lines  # up, and it wants the token
        assert layout.workspace("rms_norm").stat().st_uid == 65534
        assert (
            stat.S_IMODE(layout.ops_dir.stat().st_mode) == 0o700
            and RunStore(RunLayout(run)).load_state("rms_norm").attempts == 1
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
