"""The real Claude Code and Codex CLIs through `bench run`, with a scripted fake model on
127.0.0.1 playing list_problems → get_problem → validate → package for one operator. No model
service is contacted. Skipped, with the reason, when npm cannot provide the CLIs.

As root the agent runs as uid 65534 and reaches the server over HTTP (the strong setup);
unprivileged (CI) it shares the uid and its CLI starts the server over stdio."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from atrex_mcp.agentbench.layout import RunLayout, RunStore
from atrex_mcp.cli import main
from tests.fake_models.agent_clis import installed
from tests.fake_models.anthropic_messages import fake_anthropic
from tests.fake_models.openai_responses import fake_responses
from tests.fake_models.script import Script, ToolStep

pytestmark = pytest.mark.npm
ROOT = Path(__file__).resolve().parent.parent
OP = "rms_norm"
STEPS = ["list_problems", "get_problem", "validate", "package"]


def operator_script() -> Script:
    source = (ROOT / "gpu_wiki" / "kernels" / f"{OP}.py").read_text()
    return Script(
        [
            ToolStep("list_problems", {}),
            ToolStep("get_problem", {"op": OP}),
            ToolStep("validate", {"op": OP, "source": source, "shapes": ["smoke"], "seeds": 1}),
            ToolStep("package", {"op": OP, "source": source}),
        ]
    )


def cli(name: str) -> Path:
    binary, reason = installed(name)
    if binary is None:
        pytest.skip(f"{name} CLI unavailable: {reason}")
    return binary


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder another uid can traverse (pytest's own tmp folders are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="atrex-bench-cli-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def check_run(out: Path, fake) -> None:
    layout = RunLayout(out)
    state = RunStore(layout).load_state(OP)
    assert fake.tool_calls() == STEPS, [e.answer for e in fake.exchanges]
    assert state.status == "done" and state.submission.outcome == "submitted", (
        state,
        layout.agent_log(OP).read_text()[-2000:],
    )
    assert (out / state.submission.artifact).read_text() == (ROOT / "gpu_wiki" / "kernels" / f"{OP}.py").read_text()
    assert state.usage is not None and state.usage.input_tokens > 0 and state.usage.output_tokens > 0
    assert not state.timed_out and state.elapsed_s < 240


def test_claude_code_plays_a_whole_operator(base, monkeypatch):
    binary = cli("claude")
    with fake_anthropic(operator_script()) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake-key-for-tests")
        code = main(
            [
                "bench",
                "run",
                "--agent",
                "claude",
                "--agent-bin",
                str(binary),
                "--ops",
                OP,
                "--budget-minutes",
                "4",
                "--plain",
                "--out",
                str(base / "claude"),
            ]
        )
        assert code == 0
    check_run(base / "claude", fake)
    events = [
        json.loads(line)
        for line in RunLayout(base / "claude").transcript(OP).read_text().splitlines()
        if line.startswith("{")
    ]
    assert events[-1]["type"] == "result" and events[-1]["result"] == "Finished: the kernel is packaged."
    first = next(e for e in fake.exchanges if e.answer == "tool:list_problems").body
    offered = {t["name"] for t in first["tools"] if t["name"].startswith("mcp__")}
    assert offered == {
        f"mcp__atrex__{t}" for t in ("list_problems", "get_problem", "validate", "package")
    }  # vanilla tools only


def test_codex_plays_a_whole_operator(base, monkeypatch):
    binary = cli("codex")
    with fake_responses(operator_script()) as fake:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-key-for-tests")
        provider = (
            f'model_providers.fake={{name="fake", base_url="{fake.base_url}/v1", wire_api="responses", '
            'env_key="OPENAI_API_KEY"}'
        )
        code = main(
            [
                "bench",
                "run",
                "--agent",
                "codex",
                "--agent-bin",
                str(binary),
                "--model",
                "fake-model",
                "--ops",
                OP,
                "--agent-arg=-c",
                '--agent-arg=model_provider="fake"',
                "--agent-arg=-c",
                f"--agent-arg={provider}",
                "--budget-minutes",
                "4",
                "--plain",
                "--out",
                str(base / "codex"),
            ]
        )
        assert code == 0
    check_run(base / "codex", fake)
    transcript = RunLayout(base / "codex").transcript(OP).read_text()
    assert '"type":"mcp_tool_call"' in transcript and '"tool":"package"' in transcript
