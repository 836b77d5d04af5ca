"""Fast tests of the bench parts that need no agent and no server: prompts, drivers' command
lines and environments, usage parsing, submission collection, run settings, the agent process
budget, and the progress board."""

from __future__ import annotations

import io
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest

from atrex_mcp.agentbench import isolation
from atrex_mcp.agentbench.agents import AgentTask, ClaudeDriver, CodexDriver, CommandDriver
from atrex_mcp.agentbench.collect import collect_submission
from atrex_mcp.agentbench.endpoint import McpEndpoint
from atrex_mcp.agentbench.models import AgentSpec
from atrex_mcp.agentbench.process import run_agent
from atrex_mcp.agentbench.progress import ProgressBoard
from atrex_mcp.agentbench.prompts import OPTIMIZER_TOOLS, VANILLA_TOOLS, render_prompt
from atrex_mcp.agentbench.runner import RunRequest, open_run, parse_agent
from atrex_mcp.errors import AtrexError
from atrex_mcp.package import package_source
from atrex_mcp.problemset.catalog import Catalog

ROOT = Path(__file__).resolve().parent.parent
KERNEL = (ROOT / "gpu_wiki" / "kernels" / "rms_norm.py").read_text()
ME = isolation.AgentIdentity(os.geteuid(), os.getegid())


def task(tmp_path: Path, endpoint: McpEndpoint, condition: str = "vanilla") -> AgentTask:
    tools = VANILLA_TOOLS if condition == "vanilla" else OPTIMIZER_TOOLS
    return AgentTask(
        op="rms_norm",
        prompt="do it",
        workspace=tmp_path / "work",
        home=tmp_path / "home",
        endpoint=endpoint,
        tools=tools,
        budget_s=600,
        condition=condition,
        dsl="triton",
    )


STDIO = McpEndpoint("stdio", command=["/usr/bin/python3", "-m", "atrex_mcp.cli", "serve"], env={"PYTHONPATH": "/x"})
HTTP = McpEndpoint("http", url="http://127.0.0.1:9999/mcp", token="t" * 40)


# ------------------------------------------------------------------ prompts
@pytest.mark.parametrize("condition", ["vanilla", "optimizer"])
def test_prompt_is_complete_and_names_nothing_evaluator_only(condition):
    text = render_prompt(condition, "rms_norm", "triton", 900)
    assert "$" not in text and "rms_norm" in text and "15 minutes" in text and "Triton" in text
    tools = VANILLA_TOOLS if condition == "vanilla" else OPTIMIZER_TOOLS
    assert all(f"`{t}`" in text for t in tools)
    for hidden in ("t_sol", "production", "weight", "S_agg", "metadata.json", "roofline.json"):
        assert hidden not in text
    if condition == "vanilla":
        assert "wiki_search" not in text and "record_iteration" not in text


@pytest.mark.slow
def test_the_condition_tool_lists_cover_every_tool_of_the_server(tmp_path):
    import anyio

    from atrex_mcp.agentbench.prompts import SERVER_TOOLS
    from atrex_mcp.server.app import ServerConfig, build_server

    server = build_server(ServerConfig(mode="benchmark", state_dir=tmp_path, workspaces=[tmp_path], devices=["cpu"]))
    assert {t.name for t in anyio.run(server.list_tools)} == set(SERVER_TOOLS)
    assert set(VANILLA_TOOLS) < set(OPTIMIZER_TOOLS) == set(SERVER_TOOLS)


# ------------------------------------------------------------------ drivers
def test_claude_command_line_allows_only_the_condition_tools(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.setenv("UNRELATED_SECRET", "do-not-pass")
    inv = ClaudeDriver(AgentSpec(kind="claude", model="some-model")).invocation(
        task(tmp_path, STDIO), Path("/bin/claude")
    )
    argv = inv.argv
    assert argv[:2] == ["/bin/claude", "-p"] and "--strict-mcp-config" in argv
    allowed = argv[argv.index("--allowedTools") + 1].split(",")
    assert {a for a in allowed if a.startswith("mcp__")} == {f"mcp__atrex__{t}" for t in VANILLA_TOOLS}
    denied = argv[argv.index("--disallowedTools") + 1].split(",")
    assert (
        "Bash" not in allowed
        and "Bash" in denied
        and "mcp__atrex__wiki_search" in denied
        and "mcp__atrex__validate" not in denied
    )
    assert argv[argv.index("--model") + 1] == "some-model"
    assert inv.env["ANTHROPIC_API_KEY"] == "sk-test" and "UNRELATED_SECRET" not in inv.env
    assert inv.env["HOME"] == str(tmp_path / "home") and inv.env["ENABLE_TOOL_SEARCH"] == "false"
    config = json.loads(inv.files[tmp_path / "home" / "mcp.json"])["mcpServers"]["atrex"]
    assert config == {
        "type": "stdio",
        "command": "/usr/bin/python3",
        "args": ["-m", "atrex_mcp.cli", "serve"],
        "env": {"PYTHONPATH": "/x"},
    }


def test_claude_http_config_carries_the_token(tmp_path):
    inv = ClaudeDriver(AgentSpec(kind="claude")).invocation(task(tmp_path, HTTP), Path("/bin/claude"))
    config = json.loads(inv.files[tmp_path / "home" / "mcp.json"])["mcpServers"]["atrex"]
    assert config == {"type": "http", "url": HTTP.url, "headers": {"Authorization": f"Bearer {HTTP.token}"}}


@pytest.mark.parametrize("endpoint", [STDIO, HTTP], ids=["stdio", "http"])
def test_codex_overrides_require_the_server_and_approve_its_tools(tmp_path, endpoint):
    inv = CodexDriver(AgentSpec(kind="codex", extra_args=["-c", "x=1"])).invocation(
        task(tmp_path, endpoint, "optimizer"), Path("/bin/codex")
    )
    overrides = [inv.argv[i + 1] for i, a in enumerate(inv.argv) if a == "-c"]
    assert "mcp_servers.atrex.required=true" in overrides
    assert 'mcp_servers.atrex.default_tools_approval_mode="approve"' in overrides
    assert f"mcp_servers.atrex.enabled_tools={json.dumps(list(OPTIMIZER_TOOLS))}" in overrides
    assert inv.argv[-1] == "do it" and inv.argv[-3:-1] == ["-c", "x=1"]
    assert inv.env["CODEX_HOME"] == str(tmp_path / "home" / ".codex") and inv.argv.count("--sandbox") == 1
    replaced = CodexDriver(AgentSpec(kind="codex", extra_args=["--sandbox", "read-only"])).invocation(
        task(tmp_path, endpoint), Path("/bin/codex")
    )
    assert replaced.argv.count("--sandbox") == 1 and "workspace-write" not in replaced.argv
    if endpoint.transport == "http":
        assert (
            'mcp_servers.atrex.bearer_token_env_var="ATREX_MCP_TOKEN"' in overrides
            and inv.env["ATREX_MCP_TOKEN"] == HTTP.token
        )
    else:
        assert 'mcp_servers.atrex.env={PYTHONPATH = "/x"}' in overrides


def test_command_driver_tells_the_task_in_the_environment(tmp_path):
    inv = CommandDriver(AgentSpec(kind="command", command=["agent", "--x"])).invocation(
        task(tmp_path, STDIO), Path("/usr/bin/agent")
    )
    assert inv.argv == ["/usr/bin/agent", "--x"]
    env = inv.env
    assert env["ATREX_OP"] == "rms_norm" and env["ATREX_WORKSPACE"] == str(tmp_path / "work")
    assert json.loads(env["ATREX_MCP_COMMAND"]) == STDIO.command and env["ATREX_ALLOWED_TOOLS"] == ",".join(
        VANILLA_TOOLS
    )
    assert Path(env["ATREX_MCP_CONFIG"]) in inv.files and env["ATREX_PROMPT_FILE"].endswith("PROMPT.md")


def test_parse_agent_makes_existing_relative_paths_absolute(monkeypatch):
    monkeypatch.chdir(ROOT)
    spec = parse_agent(
        "python3 examples/bench_scripted_agent.py --kernels gpu_wiki/kernels --flag",
        binary=None,
        model=None,
        extra_args=[],
        pass_env=[],
    )
    assert spec.kind == "command"
    assert spec.command == [
        "python3",
        str(ROOT / "examples/bench_scripted_agent.py"),
        "--kernels",
        str(ROOT / "gpu_wiki/kernels"),
        "--flag",
    ]
    assert parse_agent("claude", binary=None, model="m", extra_args=[], pass_env=[]).kind == "claude"


def test_usage_from_transcripts(tmp_path):
    claude = tmp_path / "claude.log"
    claude.write_text(
        "\n".join(
            [
                json.dumps({"type": "system"}),
                "not json",
                json.dumps(
                    {
                        "type": "result",
                        "num_turns": 3,
                        "total_cost_usd": 0.25,
                        "usage": {
                            "input_tokens": 10,
                            "output_tokens": 4,
                            "cache_read_input_tokens": 7,
                            "cache_creation_input_tokens": 2,
                        },
                    }
                ),
            ]
        )
    )
    usage = ClaudeDriver.usage(claude)
    assert (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.cost_usd,
        usage.turns,
    ) == (10, 4, 7, 2, 0.25, 3)
    codex = tmp_path / "codex.log"
    codex.write_text(
        "\n".join(
            json.dumps(
                {"type": "turn.completed", "usage": {"input_tokens": n, "cached_input_tokens": 5, "output_tokens": 3}}
            )
            for n in (20, 30)
        )
    )
    usage = CodexDriver.usage(codex)
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens, usage.turns) == (40, 10, 6, 2)
    assert ClaudeDriver.usage(tmp_path / "missing.log") is None and CommandDriver.usage(codex) is None


def test_progress_text_from_transcript_lines():
    line = json.dumps(
        {"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "mcp__atrex__validate"}]}}
    )
    assert ClaudeDriver.describe(line) == "tool validate"
    line = json.dumps({"type": "item.started", "item": {"type": "mcp_tool_call", "tool": "package"}})
    assert CodexDriver.describe(line) == "tool package"
    assert CommandDriver.describe("  hello   world \n") == "hello world" and CommandDriver.describe("\n") is None


# ------------------------------------------------------------------ collection
def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "work"
    ws.mkdir()
    return ws


def test_collect_finds_nothing_in_an_empty_workspace(tmp_path):
    sub = collect_submission(_workspace(tmp_path), "rms_norm", Catalog(), tmp_path / "sub", tmp_path, "triton")
    assert sub.outcome == "no_submission" and sub.artifact is None


def test_collect_repackages_the_newest_package_and_notices_edits(tmp_path):
    ws, catalog = _workspace(tmp_path), Catalog()
    package_source(KERNEL, "rms_norm", catalog, ws / "atrex-package" / "old", created_at="2000-01-01T00:00:00+00:00")
    newest = package_source(KERNEL + "\n# v2\n", "rms_norm", catalog, ws / "atrex-package" / "new")
    package_source(
        (ROOT / "gpu_wiki" / "kernels" / "silu_and_mul.py").read_text(), "silu_and_mul", catalog, ws / "other"
    )  # not this op
    sub = collect_submission(ws, "rms_norm", catalog, tmp_path / "run" / "sub", tmp_path / "run", "triton")
    assert sub.outcome == "submitted" and sub.found == "atrex-package/new/rms_norm.py" and sub.matches_manifest
    assert (tmp_path / "run" / sub.artifact).read_text().endswith("# v2\n")
    Path(newest.artifact).write_text(KERNEL + "\n# edited after packaging\n")
    sub = collect_submission(ws, "rms_norm", catalog, tmp_path / "run" / "sub", tmp_path / "run", "triton")
    assert sub.outcome == "submitted" and sub.matches_manifest is False


def test_collect_refuses_a_hand_made_package_that_breaks_the_contract(tmp_path):
    ws = _workspace(tmp_path)
    (ws / "pkg").mkdir()
    (ws / "pkg" / "rms_norm.py").write_text("import os\nclass Model:\n    pass\n")
    (ws / "pkg" / "manifest.json").write_text(
        json.dumps({"format": "atrex-mcp package 1", "op": "rms_norm", "artifact": {"file": "rms_norm.py"}})
    )
    sub = collect_submission(ws, "rms_norm", Catalog(), tmp_path / "sub", tmp_path, "triton")
    assert sub.outcome == "contract_failed" and sub.violations and not (tmp_path / "sub").exists()


def test_collect_ignores_a_symlinked_artifact(tmp_path):
    ws = _workspace(tmp_path)
    (ws / "pkg").mkdir()
    secret = tmp_path / "elsewhere.py"
    secret.write_text(KERNEL)
    (ws / "pkg" / "rms_norm.py").symlink_to(secret)
    (ws / "pkg" / "manifest.json").write_text(
        json.dumps({"format": "atrex-mcp package 1", "op": "rms_norm", "artifact": {"file": "rms_norm.py"}})
    )
    assert (
        collect_submission(ws, "rms_norm", Catalog(), tmp_path / "sub", tmp_path, "triton").outcome == "no_submission"
    )


# ------------------------------------------------------------------ run settings
def _request(tmp_path: Path, **overrides) -> RunRequest:
    base = dict(out=tmp_path / "run", agent="/bin/true", ops="rms_norm,silu_and_mul", agent_uid="same")
    return RunRequest(**{**base, **overrides})


def test_new_run_records_its_settings_and_isolation(tmp_path):
    config, layout = open_run(_request(tmp_path, budget_minutes=2, condition="optimizer"))
    assert config.ops == ["rms_norm", "silu_and_mul"] and config.budget_s == 120 and config.condition == "optimizer"
    assert config.server == "stdio" and config.isolation.agent_uid == os.geteuid()
    assert config.isolation.hidden_readable, "same uid: the hidden files are readable and the run says so"
    assert any("evaluator-only" in w for w in config.isolation.warnings)
    assert layout.run_file.is_file() and oct(layout.ops_dir.stat().st_mode & 0o777) == "0o700"


def test_resume_refuses_other_settings_and_accepts_none(tmp_path):
    open_run(_request(tmp_path))
    config, _ = open_run(RunRequest(out=tmp_path / "run"))
    assert config.ops == ["rms_norm", "silu_and_mul"]
    with pytest.raises(AtrexError, match="--ops"):
        open_run(RunRequest(out=tmp_path / "run", ops="rms_norm"))
    with pytest.raises(AtrexError, match="--condition"):
        open_run(RunRequest(out=tmp_path / "run", condition="optimizer"))


@pytest.mark.parametrize(
    ("overrides", "category"),
    [
        ({"agent": None}, "missing_option"),
        ({"ops": "no_such_op"}, "unknown_problem"),
        ({"dsl": "cuda"}, "unknown_dsl"),
        ({"agent": "no-such-agent-program"}, "agent_not_found"),
        ({"agent_uid": "x"}, "bad_agent_uid"),
    ],
)
def test_bad_run_requests_fail_with_a_category(tmp_path, overrides, category):
    with pytest.raises(AtrexError) as info:
        open_run(_request(tmp_path, **overrides))
    assert info.value.info.category == category


def test_stdio_is_refused_for_an_agent_of_another_uid():
    with pytest.raises(AtrexError, match="stdio"):
        isolation.choose_transport("stdio", isolation.AgentIdentity(os.geteuid() + 1, 0))
    assert isolation.choose_transport("auto", ME) == "stdio"


# ------------------------------------------------------------------ the agent process
def test_agent_is_stopped_at_its_budget_with_its_whole_group(tmp_path):
    marker = tmp_path / "child-alive"
    script = f"sleep 60 & echo started; sleep 1.5; touch {marker}; wait"
    start = time.monotonic()
    done = run_agent(
        ["/bin/sh", "-c", script],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        identity=ME,
        budget_s=0.5,
        transcript=tmp_path / "t.log",
        stderr_log=tmp_path / "e.log",
        cancel=threading.Event(),
    )
    assert done.timed_out and not done.cancelled and time.monotonic() - start < 10
    time.sleep(2)
    assert not marker.exists(), "the agent's shell kept running after the budget"
    assert (tmp_path / "t.log").read_text() == "started\n"


def test_agent_lines_reach_the_callback_and_cancel_stops_it(tmp_path):
    seen: list[str] = []
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    done = run_agent(
        [sys.executable, "-c", "import time\nprint('one', flush=True)\ntime.sleep(30)"],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        identity=ME,
        budget_s=60,
        transcript=tmp_path / "t.log",
        stderr_log=tmp_path / "e.log",
        cancel=cancel,
        on_line=seen.append,
    )
    assert done.cancelled and not done.timed_out and seen == ["one\n"]


# ------------------------------------------------------------------ progress
def test_progress_prints_plain_lines_off_a_terminal():
    out = io.StringIO()
    board = ProgressBoard("bench run x", 2, stream=out)
    board.begin()
    board.stage("rms_norm", "agent started")
    board.stage("rms_norm", "agent started")  # repeated: not printed twice
    board.finish("rms_norm", "submitted")
    board.close("done")
    text = out.getvalue()
    assert "\x1b[" not in text and text.count("rms_norm: agent started") == 1
    assert "rms_norm: submitted" in text and "1/2 done" in text and text.endswith("done\n")


def test_progress_redraws_in_place_on_a_terminal():
    out = io.StringIO()
    board = ProgressBoard("bench run x", 1, stream=out, live=True)
    board.begin()
    board.stage("rms_norm", "agent: tool validate")
    time.sleep(1.2)
    board.finish("rms_norm", "submitted")
    board.close("all done")
    text = out.getvalue()
    assert re.search(r"\x1b\[1A\x1b\[2K", text), "a terminal gets cursor-up redraws"
    assert "agent: tool validate" in text and "1 running" in text and text.endswith("all done\n")


def test_ctrl_c_stops_the_agents_and_leaves_a_resumable_run(tmp_path):
    import signal
    import subprocess

    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "atrex_mcp.cli",
            "bench",
            "run",
            "--agent",
            "/bin/sleep 60",
            "--ops",
            "rms_norm,silu_and_mul",
            "--agent-uid",
            "same",
            "--plain",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    state_file = out / "ops" / "rms_norm" / "state.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and '"running"' not in (state_file.read_text() if state_file.exists() else ""):
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert json.loads(state_file.read_text())["status"] == "interrupted"
    assert not (out / "ops" / "silu_and_mul" / "state.json").exists()
    assert "run again to continue" in output
