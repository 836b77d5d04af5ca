"""The HTTP transport as a real process on loopback: bearer token required (401 without or with
a wrong one), DNS-rebinding guard (421 for a foreign Host, 403 for a foreign Origin), both
protocol eras through the SDK client with the token, and the refusals to start unsafely."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from atrex_mcp.errors import AtrexError
from atrex_mcp.server.transport import HttpSettings, build_http_app, check_settings, transport_security
from tests.server_fixtures import ERAS, config, free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "test-token-0123456789abcdef"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def cli_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("http")
    port = free_port()
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
            "ATREX_TEST_TOKEN",
            "--state-dir",
            str(tmp / "state"),
            "--workspace",
            str(tmp),
        ],
        env=cli_env(ATREX_TEST_TOKEN=TOKEN),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_port(port, proc)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(timeout=10)


def post(url: str, **headers: str) -> httpx2.Response:
    return httpx2.post(url, json=INIT, headers={**HEADERS, **headers}, timeout=10)


def test_requests_without_the_token_get_401(http_server):
    assert post(http_server).status_code == 401
    assert post(http_server, Authorization="Bearer wrong-token-0123456789").status_code == 401
    assert post(http_server, Authorization=f"Basic {TOKEN}").status_code == 401


def test_foreign_host_and_origin_are_refused(http_server):
    auth = f"Bearer {TOKEN}"
    assert post(http_server, Authorization=auth, Host="evil.example.com").status_code == 421
    assert post(http_server, Authorization=auth, Origin="http://evil.example.com").status_code == 403
    assert post(http_server, Authorization=auth, Origin="http://127.0.0.1:1234").status_code == 200


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_sdk_client_with_the_token_in_both_eras(http_server, era):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"})
    async with Client(streamable_http_client(http_server, http_client=http), mode=era) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        listed = await client.call_tool("list_problems", {})
    assert {"validate", "list_problems"} <= names and not listed.is_error


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.parametrize(
    ("host", "token", "allowed", "category"),
    [
        ("0.0.0.0", "", [], "http_needs_token"),
        ("192.0.2.10", "", [], "http_needs_token"),
        ("127.0.0.1", "", [], "http_needs_token"),
        ("127.0.0.1", "short", [], "weak_token"),
        ("0.0.0.0", TOKEN, [], "http_needs_allowed_host"),
    ],
)
def test_unsafe_setups_are_refused(host, token, allowed, category):
    with pytest.raises(AtrexError) as err:
        check_settings(HttpSettings(host=host, token=token, allowed_hosts=allowed))
    assert err.value.info.category == category
    if host == "192.0.2.10":
        assert "non-loopback" in err.value.info.message


def test_a_non_loopback_bind_admits_only_its_own_names(tmp_path):
    http = HttpSettings(host="192.0.2.10", token=TOKEN, allowed_hosts=["gpu-box.example"])
    build_http_app(config(tmp_path), http)
    guard = transport_security(http)
    assert guard.enable_dns_rebinding_protection
    assert set(guard.allowed_hosts) == {"gpu-box.example", "gpu-box.example:*", "192.0.2.10", "192.0.2.10:*"}
    assert "http://gpu-box.example:*" in guard.allowed_origins and not any(
        "127.0.0.1" in o for o in guard.allowed_origins
    )


def test_the_cli_refuses_non_loopback_without_a_token(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "atrex_mcp.cli",
            "serve",
            "--transport",
            "http",
            "--host",
            "0.0.0.0",
            "--state-dir",
            str(tmp_path),
        ],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "without a bearer token" in done.stderr and "non-loopback" in done.stderr
