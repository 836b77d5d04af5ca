"""Benchmark mode's boundary, tried from outside: a real `atrex-mcp serve --benchmark-mode`
over stdio, every tool called the normal way, the wrong way and the sneaky way (path tricks,
candidates that try to read or smuggle hidden files, error paths), and every byte that comes
back (results, structured content, error texts) and every server log line scanned for the
hidden figures of the operator (T_SOL, intensity, production timings, weight) and its
provenance strings. Plus the redactor itself, and the strong setup: a process of another
account cannot read the hidden files at all."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from atrex_mcp.paths import REPO_ROOT, problems_dir
from atrex_mcp.policy import WITHHELD, Policy
from atrex_mcp.problemset.catalog import Catalog
from tests.server_fixtures import free_port, hidden_figures, leaks, result_text, wait_for_port

pytestmark = pytest.mark.anyio

OP = "rms_norm"
EXAMPLE = REPO_ROOT / "examples" / "rms_norm_triton.py"
TOKEN = "strong-setup-token-0123456789"
T_SOL = repr(Catalog().hidden(OP).roofline["shapes"]["0"]["t_sol_ms"]["h200"])


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _candidate(body: str) -> str:
    """The example kernel with `body` run first thing in forward."""
    head, tail = EXAMPLE.read_text().split("\n    def forward(", 1)
    signature, rest = tail.split("\n", 1)
    return f"{head}\n    def forward({signature}\n{body}\n{rest}"


def _sneaky_candidates(hidden_dir: Path) -> dict[str, str]:
    """Kernel files that try to get the hidden files out through every channel a result has."""
    read_hidden = f"open({str(hidden_dir / 'roofline.json')!r}).read()"
    return {
        "reads_at_import.py": f"data = {read_hidden}\nraise RuntimeError(data)\n",
        "reads_relative.py": "import pathlib\n"
        "found = [p / 'problems/rms_norm/roofline.json' for p in pathlib.Path.cwd().parents]\n"
        "raise RuntimeError(str([p.read_text() for p in found if p.exists()]))\n",
        "prints_in_forward.py": _candidate(f"        print({read_hidden}, flush=True)"),
        "raises_in_forward.py": _candidate(f"        raise ValueError({read_hidden})"),
        "returns_hidden_value.py": _candidate(
            "        import json\n"
            f"        t = json.loads({read_hidden})['shapes']['0']['t_sol_ms']['h200']\n"
            "        return torch.full_like(x, t)"
        ),
        "echoes_hidden_literal.py": f"raise RuntimeError('t_sol is {T_SOL}')\n",
    }


def _path_tricks(workspace: Path, hidden_dir: Path) -> list[str]:
    return [
        "problems/rms_norm/roofline.json",
        "problems/weights.json",
        str(hidden_dir / "metadata.json"),
        os.path.relpath(REPO_ROOT / "problems" / OP / "roofline.json", workspace),
        "hidden_link.py",
        "hidden_dir/roofline.json",
        "sub/../problems/rms_norm/metadata.json",
        "/proc/self/environ",
    ]


def _calls(sneaky: list[str], tricks: list[str], hidden_dir: Path) -> list[tuple[str, dict]]:
    smoke = {"op": OP, "shapes": ["smoke"], "seeds": 1}
    calls: list[tuple[str, dict]] = [
        ("list_problems", {}),
        ("get_problem", {"op": OP}),
        ("get_problem", {"op": "../rms_norm"}),
        ("roofline_lookup", {"flops": 10**9, "dtype_path": "bf16", "bytes_read": 10**6, "bytes_written": 10**6}),
        ("roofline_lookup", {"op": OP, "shape": "0"}),
        ("roofline_lookup", {"op": OP, "shape": "0", "hardware": "xpu-a"}),
        ("roofline_lookup", {"op": OP}),
        ("roofline_lookup", {"shape": "0"}),
        ("wiki_search", {"query": "rms_norm roofline speed of light production timing"}),
        ("wiki_read", {"doc_id": "docs/hardware/roofline-model"}),
        ("wiki_read", {"doc_id": f"../../problems/{OP}/roofline"}),
        ("validate", {**smoke, "path": "kernel.py"}),
        ("validate", {"op": OP, "shapes": ["no-such-shape"], "path": "kernel.py"}),
        ("profile_kernel", {"op": OP, "path": "kernel.py"}),
        ("package", {"op": OP, "path": "kernel.py"}),
        ("package", {"op": OP, "path": "kernel.py", "out_dir": str(hidden_dir)}),
        ("package", {"op": OP, "path": "kernel.py", "out_dir": "hidden_dir"}),
        ("package", {"op": OP, "path": "kernel.py", "out_dir": "problems/new_op"}),
    ]
    calls += [("validate", {**smoke, "path": name}) for name in sneaky]
    calls += [
        (tool, {"op": OP, "path": trick}) for trick in tricks for tool in ("validate", "profile_kernel", "package")
    ]
    return calls


@pytest.mark.slow
async def test_no_hidden_figure_leaves_a_benchmark_mode_server(tmp_path):
    # The agent's checkout holds the problem set (hidden files included), as a clone of this repository does.
    workspace = tmp_path / "workspace"
    shutil.copytree(problems_dir(), workspace / "problems")
    hidden_dir = workspace / "problems" / OP
    (workspace / "sub").mkdir()
    shutil.copy(EXAMPLE, workspace / "kernel.py")
    sneaky = _sneaky_candidates(hidden_dir)
    for name, text in sneaky.items():
        (workspace / name).write_text(text)
    (workspace / "hidden_link.py").symlink_to(hidden_dir / "roofline.json")
    (workspace / "hidden_dir").symlink_to(hidden_dir)
    tricks = _path_tricks(workspace, hidden_dir)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(REPO_ROOT), "TRITON_INTERPRET": "1"}
    params = StdioServerParameters(
        command=sys.executable,
        env=env,
        cwd=str(workspace),
        args=[
            "-m",
            "atrex_mcp.cli",
            "serve",
            "--benchmark-mode",
            "--problems",
            str(workspace / "problems"),
            "--workspace",
            str(workspace),
            "--state-dir",
            str(tmp_path / "state"),
        ],
    )
    calls = _calls(list(sneaky), tricks, hidden_dir)
    received: list[tuple[bool, str]] = []
    with open(tmp_path / "server.log", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            for tool, args in calls:
                result = await client.call_tool(tool, args)
                received.append((result.is_error, f"{tool} {args}: {result_text(result)}"))
    log = (tmp_path / "server.log").read_text()
    numbers, strings = hidden_figures(OP)
    for _, text in [*received, (False, log)]:
        assert not leaks(text, numbers, strings), text[:2000]
    outcome = dict(zip([f"{tool} {sorted(args.items())}" for tool, args in calls], received))
    assert "Tool 'roofline_lookup' failed" in log  # the log was captured and scanned
    assert "hidden in benchmark mode" in outcome[f"roofline_lookup {sorted({'op': OP, 'shape': '0'}.items())}"][1]
    # Path tricks were refused before anything was read; the sneaky candidates ran and failed.
    for tool, args in calls:
        is_error, text = outcome[f"{tool} {sorted(args.items())}"]
        if args.get("path") in tricks or args.get("out_dir"):
            assert is_error and "category: path_outside_workspace" in text, text
        if args.get("path") in sneaky:
            assert not is_error and '"passed": 0' in text, text
    assert '"passed": 1' in received[11][1]


def test_the_log_redactor_answers_the_same_for_hidden_and_other_figures():
    """Benchmark-mode logs are masked without looking at any hidden value: a hidden figure and
    any other number come out the same, and dumps of the hidden files' keys are withheld."""
    policy = Policy("benchmark", Catalog())
    roofline_text = (problems_dir() / OP / "roofline.json").read_text()
    metadata = Catalog().hidden(OP).metadata
    for leaked in (roofline_text, "{'production_us': 1}", str(metadata)):
        assert policy.redact(leaked) == WITHHELD
    numbers, _ = hidden_figures(OP)
    for hidden in sorted(numbers)[:50]:
        other = hidden * 1.37
        assert policy.redact(f"t = {hidden!r} ms") == policy.redact(f"t = {other!r} ms") == "t = <num> ms"
    for honest in ("hidden 1024, tokens 2500", "offsets overflow int32 at 2147483648"):
        assert policy.redact(honest) == honest
    assert Policy("optimize", Catalog()).redact(roofline_text) == roofline_text


# What the agent's account runs: read the hidden files directly, then use the server over HTTP.
AGENT_PROBE = r"""
import json, os, sys, urllib.request
url, token = sys.argv[1], os.environ["ATREX_TOKEN"]
for path in sys.argv[2:]:
    try:
        open(path).read()
        print("READ", path)
    except PermissionError:
        print("DENIED", path)
def call(body, session=None):
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "Authorization": "Bearer " + token, "MCP-Protocol-Version": "2025-06-18"}
    if session:
        headers["Mcp-Session-Id"] = session
    with urllib.request.urlopen(urllib.request.Request(url, json.dumps(body).encode(), headers), timeout=60) as reply:
        lines = reply.read().decode().splitlines()
        return reply.headers.get("Mcp-Session-Id"), [json.loads(l[6:]) for l in lines if l.startswith("data: ")]
session, _ = call({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "agent", "version": "1"}}})
call({"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
def tool(call_id, name, arguments):
    return {"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
_, listed = call(tool(2, "list_problems", {}), session)
_, got = call(tool(3, "get_problem", {"op": "rms_norm"}), session)
print("PROBLEMS", len(listed[-1]["result"]["structuredContent"]["problems"]))
print("ROOFLINES", sum(s["roofline"] is not None for s in got[-1]["result"]["structuredContent"]["shapes"]))
"""


@pytest.fixture
def shared_tmp():
    """A folder every account can traverse (pytest's own tmp folders are private to root)."""
    base = Path(tempfile.mkdtemp(prefix="atrex-strong-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base)


def test_the_strong_setup_another_account_uses_the_tools_but_cannot_read_the_hidden_files(shared_tmp):
    """docs/server.md's strong setup: the server runs as one account (root here) over a problem
    set only it can read (a 0700 folder), serving benchmark mode over HTTP on loopback with a
    token; the agent runs as another account (uid 65534). The agent's process gets the tools'
    answers but PermissionError for every hidden file."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create files of one account and run a process as another")
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if python is None or subprocess.run([python, "-I", "-c", "pass"], user=65534, capture_output=True).returncode != 0:
        pytest.skip("no python3 that uid 65534 can run")
    server_home = shared_tmp / "server-home"
    server_home.mkdir(mode=0o700)
    shutil.copytree(problems_dir(), server_home / "problems")
    workspace = shared_tmp / "agent-workspace"
    workspace.mkdir(mode=0o755)
    visible = workspace / "reference.py"  # the control: a file the agent's account may read, next door
    shutil.copy(problems_dir() / OP / "reference.py", visible)
    visible.chmod(0o644)
    hidden = [str(server_home / "problems" / OP / name) for name in ("metadata.json", "roofline.json")]
    hidden.append(str(server_home / "problems" / "weights.json"))
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "atrex_mcp.cli",
            "serve",
            "--benchmark-mode",
            "--transport",
            "http",
            "--port",
            str(port),
            "--token-env",
            "ATREX_TOKEN",
            "--problems",
            str(server_home / "problems"),
            "--state-dir",
            str(server_home / "state"),
            "--workspace",
            str(workspace),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "ATREX_TOKEN": TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_port(port, server)
        agent = subprocess.run(
            [python, "-I", "-c", AGENT_PROBE, f"http://127.0.0.1:{port}/mcp", str(visible), *hidden],
            user=65534,
            group=65534,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "ATREX_TOKEN": TOKEN},
        )
    finally:
        server.terminate()
        server.wait(timeout=20)
    assert agent.returncode == 0, agent.stderr
    assert agent.stdout.splitlines() == [
        f"READ {visible}",
        *(f"DENIED {path}" for path in hidden),
        f"PROBLEMS {len(Catalog().names())}",
        "ROOFLINES 0",
    ]
