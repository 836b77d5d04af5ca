"""`atrex-mcp doctor` and `atrex-mcp config`: what a user runs to see what isolation and setup
they got, and to register this install with a client from anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from atrex_mcp.doctor import client_checks, isolation_checks, isolation_summary, state_check
from atrex_mcp.paths import REPO_ROOT
from atrex_mcp.registration import Launch, claude_block, codex_block, judge, this_install

EXAMPLE = REPO_ROOT / "examples" / "rms_norm_triton.py"
PLAN = {
    "drop_uid": True,
    "pid_namespace": True,
    "mount_namespace": True,
    "prefix": ["unshare"],
    "setpriv": "/usr/bin/setpriv",
    "memory_cgroup": 2,
    "notes": [],
}


def _cli(*args: str, home: Path, cwd: Path, extra_path: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HOME": str(home)}
    env.pop("CODEX_HOME", None)
    if extra_path is not None:
        env["PATH"] = f"{extra_path}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        [sys.executable, "-m", "atrex_mcp.cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    """One state folder for the module: its wiki index is built once."""
    return tmp_path_factory.mktemp("doctor-state")


def _by(checks, area: str, name: str):
    return next(c for c in checks if c.area == area and c.name == name)


def test_doctor_json_reports_every_area_and_a_real_worker(tmp_path, state):
    done = _cli("doctor", "--json", "--state-dir", str(state), home=tmp_path, cwd=tmp_path)
    report = json.loads(done.stdout)
    areas = {c["area"] for c in report["checks"]}
    assert {"install", "isolation", "gpu", "ncu", "problems", "wiki", "state", "claude", "codex"} <= areas
    worker = next(c for c in report["checks"] if c["name"] == "worker")
    assert worker["status"] in ("ok", "warn"), worker
    assert "judged the example" in worker["detail"]
    assert all(c["status"] in ("ok", "warn", "fail", "info") and c["detail"] for c in report["checks"])
    assert all(c["action"] for c in report["checks"] if c["status"] in ("warn", "fail"))
    assert done.returncode == (1 if any(c["status"] == "fail" for c in report["checks"]) else 0), done.stderr


def test_doctor_text_names_status_and_action(tmp_path, state):
    done = _cli("doctor", "--no-probe", "--state-dir", str(state), home=tmp_path, cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert any(line.startswith("[") and "isolation" in line and "Landlock" in line for line in lines)
    assert any("-> to use it from Codex: `atrex-mcp config codex`" in line for line in lines)
    assert lines[-1].endswith("warnings")


def test_isolation_plan_turns_into_actions(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    good = isolation_checks(PLAN, landlock_abi=6)
    assert all(c.status == "ok" for c in good), good
    blocked = {
        **PLAN,
        "drop_uid": False,
        "notes": ["uid 65534 cannot reach /root/venv/bin/python3 (…): the worker stays uid 0"],
    }
    uid = _by(isolation_checks(blocked, 6), "isolation", "uid switch")
    assert uid.status == "warn" and "/root/venv/bin/python3" in uid.detail and "/opt" in uid.action
    bare = {
        **PLAN,
        "pid_namespace": False,
        "mount_namespace": False,
        "prefix": [],
        "notes": ["no PID namespace (needs root …)"],
    }
    checks = isolation_checks(bare, landlock_abi=0)
    assert _by(checks, "isolation", "mount namespace").status == "fail"
    assert _by(checks, "isolation", "Landlock").status == "fail"
    assert _by(checks, "isolation", "PID namespace").status == "warn"
    assert _by(isolation_checks(PLAN, landlock_abi=3), "isolation", "Landlock").status == "warn"


def test_the_launchers_own_notes_and_seccomp_answer_are_shown(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    filtered = {**PLAN, "seccomp": {"available": True, "error": ""}}
    assert _by(isolation_checks(filtered, 6), "isolation", "seccomp").detail == "workers get a seccomp filter"
    missing = {
        **PLAN,
        "seccomp": {"available": False, "error": "no libseccomp binding"},
        "notes": ["no seccomp filter: no libseccomp binding", "no network namespace: the filter alone keeps it off"],
    }
    checks = isolation_checks(missing, 6)
    assert (
        _by(checks, "isolation", "seccomp").status == "warn"
        and "libseccomp" in _by(checks, "isolation", "seccomp").detail
    )
    assert [c.detail for c in checks if c.name == "limit"] == ["no network namespace: the filter alone keeps it off"]
    uncapped = {**PLAN, "memory_cgroup": None, "notes": ["no memory cgroup per worker (cgroup v2: not delegated)"]}
    cap = _by(isolation_checks(uncapped, 6), "isolation", "memory cap")
    assert cap.status == "warn" and "not delegated" in cap.detail and "cgroup" in cap.action
    placement = "/a/b holds other processes: worker cgroups go below /a/atrex-server-7-9"
    cap = _by(isolation_checks({**PLAN, "memory_cgroup_placement": placement}, 6), "isolation", "memory cap")
    assert cap.status == "ok" and cap.detail.endswith(f"(cgroup v2); {placement}")


def test_state_dir_readable_by_others_is_a_warning(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    assert state_check(state).status == "warn" and "chmod 700" in state_check(state).action
    state.chmod(0o700)
    assert state_check(state).status == "ok"
    assert state_check(tmp_path / "new").status == "ok"  # created private


def test_the_printed_blocks_register_this_install(tmp_path):
    launch = Launch("/opt/atrex/bin/atrex-mcp", ["serve", "--benchmark-mode"])
    toml = tomllib.loads(codex_block(launch))["mcp_servers"]["atrex"]
    assert toml["command"] == launch.command and toml["args"] == launch.args
    assert toml["required"] is True and toml["startup_timeout_sec"] >= 20 and toml["tool_timeout_sec"] >= 300
    claude = claude_block(launch).splitlines()
    assert "claude mcp add atrex -- /opt/atrex/bin/atrex-mcp serve --benchmark-mode" in claude
    project = json.loads(claude[-1].removeprefix("# "))["mcpServers"]["atrex"]
    assert project["command"] == launch.command and project["args"] == launch.args


def test_config_prints_the_absolute_path_of_this_install(tmp_path):
    done = _cli("config", "codex", home=tmp_path, cwd=tmp_path)
    server = tomllib.loads(done.stdout)["mcp_servers"]["atrex"]
    assert done.returncode == 0 and os.path.isabs(server["command"]) and server["required"] is True
    # Run from a checkout through PYTHONPATH, the block carries it: the server it starts is this one.
    assert server["args"][:2] == ["-m", "atrex_mcp.cli"] and server["env"]["PYTHONPATH"] == str(REPO_ROOT)


def test_client_configs_are_judged_against_this_install(tmp_path, monkeypatch):
    launch = this_install()
    monkeypatch.delenv("CODEX_HOME", raising=False)
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "config.toml").write_text(codex_block(launch) + '\n\n[mcp_servers.other]\ncommand = "x"\n')
    project = tmp_path / "proj"
    project.mkdir()
    (tmp_path / ".claude.json").write_text(
        json.dumps(
            {
                "mcpServers": {"atrex": {"type": "stdio", "command": "atrex-mcp-missing", "args": ["serve"]}},
                "projects": {str(project): {"mcpServers": {"atrex": {"command": launch.command, "args": launch.args}}}},
            }
        )
    )
    (project / ".mcp.json").write_text("{not json")
    checks = client_checks(tmp_path, project, run_claude=False)
    codex = [c for c in checks if c.area == "codex"]
    assert [c.status for c in codex] == ["ok"] and "this install" in codex[0].detail  # "other" is not ours
    claude = {c.detail.split(":")[0].split("(")[-1]: c for c in checks if c.area == "claude"}
    assert claude["user scope)"].status == "fail" and "does not exist" in claude["user scope)"].detail
    assert claude[f"local scope of {project})"].status == "ok"
    assert any(c.status == "warn" and ".mcp.json" in c.detail and "cannot be read" in c.detail for c in checks)


def test_a_codex_entry_without_the_start_up_settings_is_a_warning():
    launch = this_install()
    from atrex_mcp.registration import ClientEntry

    entry = judge(ClientEntry("codex", "config.toml", "atrex", launch.command, launch.args, {}), launch)
    assert entry.verdict == "warn"
    assert any("required = true" in p for p in entry.problems) and any(
        "startup_timeout_sec" in p for p in entry.problems
    )


@pytest.mark.parametrize(
    "line, status",
    [("atrex: /x/atrex-mcp serve - ✔ Connected", "ok"), ("atrex: /x/atrex-mcp serve - ✘ Failed to connect", "fail")],
)
def test_claude_mcp_list_is_the_clients_own_verdict(tmp_path, monkeypatch, line, status):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "claude").write_text(f"#!/bin/sh\necho 'Checking MCP server health…'\necho '{line}'\n")
    (fake / "claude").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CODEX_HOME", raising=False)
    listed = _by(client_checks(tmp_path, tmp_path), "claude", "claude mcp list")
    assert listed.status == status and "atrex" in listed.detail


@pytest.mark.slow
def test_eval_points_to_doctor_instead_of_printing_isolation_notes(tmp_path):
    assert isolation_summary([]) is None
    assert "atrex-mcp doctor" in isolation_summary(["uid 65534 cannot reach /root/x"])
    done = _cli(
        "eval", str(EXAMPLE), "--op", "rms_norm", "--shapes", "smoke", "--seeds", "1", home=tmp_path, cwd=tmp_path
    )
    assert "cannot reach" not in done.stdout + done.stderr
    notes = [line for line in done.stdout.splitlines() if line.startswith("isolation:")]
    assert len(notes) <= 1 and all("atrex-mcp doctor" in line for line in notes)
