"""Runs belong to the client that started them: over HTTP each bearer token is one client, and a
run id of another client is answered exactly like an id that does not exist, by every run tool;
an unknown id reveals no path and no other run. HTTP refuses every spelling of a wildcard bind
without --allowed-host."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from atrex_mcp.errors import AtrexError
from atrex_mcp.runs.store import RunStore
from atrex_mcp.server.transport import HttpSettings, check_settings, client_id, is_wildcard
from tests.runs_fixtures import ScriptedJudge, make_service, source
from tests.server_fixtures import config, connect, free_port, wait_for_port

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent
TOKEN_A = "tenant-a-token-0123456789abcdef"
TOKEN_B = "tenant-b-token-0123456789abcdef"
MISSING = "run-000000000000"


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def two_client_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tenancy")
    (tmp / "kernel.py").write_text(source(1.0, "a"))
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", "TOKEN_A": TOKEN_A, "TOKEN_B": TOKEN_B}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "atrex_mcp.cli",
            "serve",
            "--transport",
            "http",
            "--port",
            str(port),
            "--token-env",
            "TOKEN_A",
            "--token-env",
            "TOKEN_B",
            "--state-dir",
            str(tmp / "state"),
            "--workspace",
            str(tmp),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_port(port, proc)
    yield f"http://127.0.0.1:{port}/mcp", tmp
    proc.terminate()
    proc.wait(timeout=10)


def _client(url: str, token: str) -> Client:
    return Client(
        streamable_http_client(
            url, http_client=httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=300)
        )
    )


def _error(result) -> str:
    assert result.is_error
    return result.content[0].text.replace("Error executing tool ", "", 1).split(": ", 1)[1]


async def test_another_tokens_run_is_unknown_to_every_run_tool(two_client_server):
    url, workspace = two_client_server
    async with _client(url, TOKEN_A) as a:
        started = await a.call_tool("start_run", {"op": "rms_norm", "shapes": ["smoke"]})
        assert not started.is_error, started.content[0].text
        run_id = started.structured_content["run_id"]
        mine = await a.call_tool("run_state", {"run_id": run_id})
        assert not mine.is_error and mine.structured_content["run_id"] == run_id
    plan = {
        "change": "wider rows",
        "bottleneck": "memory",
        "evidence": ["prof-000000000000"],
        "expected_effect": 1.1,
        "category": "tiling",
    }
    calls = [
        ("run_state", {}),
        ("partial_restart", {"fraction": 0.5, "seed": 1}),
        ("unmask", {}),
        ("package_run", {}),
        ("submit_baseline", {"path": "kernel.py"}),
        ("record_iteration", {"path": "kernel.py", "plan": plan}),
        ("profile_kernel", {"op": "rms_norm", "path": "kernel.py", "shape": "smoke"}),
    ]
    async with _client(url, TOKEN_B) as b:
        for tool, args in calls:
            theirs = await b.call_tool(tool, {**args, "run_id": run_id})
            missing = await b.call_tool(tool, {**args, "run_id": MISSING})
            assert _error(theirs) == _error(missing), (tool, _error(theirs))
            assert "category: unknown_run" in _error(theirs) and run_id not in _error(theirs)
        assert not (workspace / "atrex-package" / run_id).exists()
    async with _client(url, TOKEN_A) as a:  # the owner's run is as it was
        state = (await a.call_tool("run_state", {"run_id": run_id})).structured_content
        assert state["baseline"] is None and state["live_masks"] == []


async def test_an_unknown_run_id_names_no_path_and_no_other_run(tmp_path):
    cfg = config(tmp_path)
    async with connect(cfg) as client:
        run_id = (await client.call_tool("start_run", {"op": "rms_norm", "shapes": ["0"]})).structured_content["run_id"]
        for probe in (MISSING, "../runs.sqlite3", "run-' OR '1'='1"):
            text = (await client.call_tool("run_state", {"run_id": probe})).content[0].text
            assert "category: unknown_run" in text
            assert run_id not in text and str(cfg.state_dir) not in text and "sqlite3" not in text and probe not in text


def test_a_store_scoped_to_one_client_sees_only_its_runs_and_profiles(tmp_path):
    service = make_service(tmp_path, ScriptedJudge())
    alice, bob = service.store.scoped("alice"), service.store.scoped("bob")
    service.store = alice
    run = service.start_run("rms_norm", ["0"])
    profile = alice.save_profile(
        op="rms_norm", shape="0", source_sha256="0" * 64, tool="ncu", report={}, run_id=run.run_id
    )
    with pytest.raises(AtrexError) as err:
        bob.get_run(run.run_id)
    assert err.value.info.category == "unknown_run"
    with pytest.raises(AtrexError):
        bob.get_profile(profile)
    with pytest.raises(AtrexError):  # nor may bob attach a profile to alice's run
        bob.save_profile(op="rms_norm", shape="0", source_sha256="0" * 64, tool="ncu", report={}, run_id=run.run_id)
    assert bob.profile_ops([profile]) == {} and alice.profile_ops([profile]) == {profile: "rms_norm"}
    assert [r.run_id for r in bob.list_runs()] == [] and [r.run_id for r in alice.list_runs()] == [run.run_id]
    assert [r.run_id for r in RunStore(tmp_path / "state").list_runs()] == [run.run_id]  # the operator sees all


def test_runs_of_an_older_single_client_state_become_the_local_clients(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    with sqlite3.connect(state / "runs.sqlite3") as con:
        con.executescript("""
            CREATE TABLE runs (run_id TEXT PRIMARY KEY, op TEXT NOT NULL, shapes TEXT NOT NULL, dsl TEXT NOT NULL,
                hardware TEXT NOT NULL, workspace TEXT NOT NULL, roofline TEXT NOT NULL, baseline INTEGER,
                accepted INTEGER, created_at TEXT NOT NULL);
            CREATE TABLE profiles (profile_id TEXT PRIMARY KEY, run_id TEXT, op TEXT NOT NULL, shape TEXT NOT NULL,
                source_sha256 TEXT NOT NULL, tool TEXT NOT NULL, report TEXT NOT NULL, created_at TEXT NOT NULL);
            PRAGMA user_version=1;""")
        con.execute(
            "INSERT INTO runs VALUES ('run-old', 'rms_norm', '[\"0\"]', 'triton', 'h200', '{}', '{}', NULL, NULL, "
            "'then')"
        )
    store = RunStore(state)
    assert store.scoped("local").get_run("run-old").op == "rms_norm"
    with pytest.raises(AtrexError):
        store.scoped(client_id(TOKEN_A)).get_run("run-old")


def test_each_token_is_its_own_client_and_tokens_must_differ():
    assert client_id(TOKEN_A) != client_id(TOKEN_B) and TOKEN_A not in client_id(TOKEN_A)
    with pytest.raises(AtrexError) as err:
        check_settings(HttpSettings(token=TOKEN_A, more_tokens=[TOKEN_A]))
    assert err.value.info.category == "duplicate_token"
    with pytest.raises(AtrexError) as err:
        check_settings(HttpSettings(token=TOKEN_A, more_tokens=["short"]))
    assert err.value.info.category == "weak_token"


WILDCARDS = ["0", "0.0.0.0", "::", "::0", "[::]", "[::0]", "", " ", "0x0", "0.0", "000.000.000.000", "0:0:0:0:0:0:0:0"]


@pytest.mark.parametrize("host", WILDCARDS)
def test_every_wildcard_bind_needs_an_allowed_host(host):
    assert is_wildcard(host)
    with pytest.raises(AtrexError) as err:
        check_settings(HttpSettings(host=host, token=TOKEN_A))
    assert err.value.info.category == "http_needs_allowed_host"
    check_settings(HttpSettings(host=host, token=TOKEN_A, allowed_hosts=["gpu-box.example"]))


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1", "::1", "[::1]", "localhost", "192.0.2.10", "gpu-box.example"])
def test_a_single_address_is_no_wildcard(host):
    assert not is_wildcard(host)
    check_settings(HttpSettings(host=host, token=TOKEN_A))


@pytest.mark.parametrize("host", ["0", "::0"])
def test_the_cli_refuses_a_wildcard_bind_in_one_line(tmp_path, host):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "atrex_mcp.cli",
            "serve",
            "--transport",
            "http",
            "--host",
            host,
            "--token-env",
            "TOKEN_A",
            "--state-dir",
            str(tmp_path),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT), "TOKEN_A": TOKEN_A},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--allowed-host" in done.stderr and len(done.stderr.strip().splitlines()) == 1, (
        done.stderr
    )
    assert "Traceback" not in done.stderr
