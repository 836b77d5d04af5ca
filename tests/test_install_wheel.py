"""The package as users install it: a wheel built from this tree in a fresh virtual environment
(the package data, problem set included, then lives inside site-packages) and the checkout as an
editable install sees it. Each evaluates the shipped example kernel at its smoke shape through
`atrex-mcp eval` and through `atrex-mcp serve` with a real MCP stdio client calling `validate`.
Run as root (CI is) the worker gets its mount namespace, which must cope with the wheel's nested
protected folders.

The wheel is built once per session (`pip wheel --no-deps`; ATREX_TEST_WHEEL names a wheel built
elsewhere, for a machine without a package index) and installed without its dependencies into a
venv that sees the system's packages; the test checks that `import atrex_mcp` there resolves to
the wheel, not to the checkout."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from sandbox.launcher import import_paths, isolation_plan

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "rms_norm_triton.py"


@dataclass
class Install:
    name: str
    command: list[str]  # how a user starts `atrex-mcp` in this install
    env: dict[str, str]
    package_dir: Path  # where `import atrex_mcp` resolves in it


def _env(home: Path, pythonpath: str | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "ATREX_PROBLEMS", "ATREX_STATE_DIR", "VIRTUAL_ENV")
    }
    env["HOME"] = str(home)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def _package_dir(python: str, env: dict[str, str], cwd: Path) -> Path:
    done = subprocess.run(
        [python, "-c", "import atrex_mcp, sandbox; print(atrex_mcp.__file__); print(sandbox.__file__)"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    package, sandbox = (Path(line).parent for line in done.stdout.split())
    assert package.parent == sandbox.parent, "atrex_mcp and sandbox must come from the same install"
    return package


def build_wheel(dist: Path) -> Path:
    """`pip wheel` of this tree; without build isolation where the build backend is installed
    (no download, and a machine without a package index can build it too)."""
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("hatchling") else []
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, str(ROOT), "-w", str(dist)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = dist.glob("atrex_mcp-*.whl")
    return wheel


@pytest.fixture(scope="session")
def wheel_install(tmp_path_factory) -> Install:
    base = tmp_path_factory.mktemp("wheel-install")
    wheel = (
        Path(os.environ["ATREX_TEST_WHEEL"]).resolve()
        if os.environ.get("ATREX_TEST_WHEEL")
        else build_wheel(base / "dist")
    )
    venv = base / "venv"
    # No pip inside: this interpreter's pip installs into it (quicker, and needs no ensurepip).
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True, timeout=300
    )
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    env = _env(base / "home", None)
    (base / "home").mkdir()
    return Install(
        "wheel", [str(venv / "bin" / "atrex-mcp")], env, _package_dir(str(venv / "bin" / "python"), env, base)
    )


@pytest.fixture(scope="session")
def checkout_install(tmp_path_factory) -> Install:
    home = tmp_path_factory.mktemp("checkout-home")
    env = _env(home, str(ROOT))
    return Install("checkout", [sys.executable, "-m", "atrex_mcp.cli"], env, _package_dir(sys.executable, env, home))


@pytest.fixture(params=["wheel", "checkout"])
def install(request) -> Install:
    return request.getfixturevalue(f"{request.param}_install")


def test_the_wheel_is_what_the_venv_imports(wheel_install):
    assert "site-packages" in wheel_install.package_dir.parts
    assert not wheel_install.package_dir.is_relative_to(ROOT)
    assert (wheel_install.package_dir / "_embedded" / "problems" / "rms_norm" / "reference.py").is_file()


def test_eval_judges_the_example_at_its_smoke_shape(install, tmp_path):
    done = subprocess.run(
        [*install.command, "eval", str(EXAMPLE), "--op", "rms_norm", "--shapes", "smoke", "--seeds", "1", "--json"],
        env=install.env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["compiled"] and [s["correct"] for s in result["shapes"]] == [True], done.stdout[-3000:]
    plan = isolation_plan(import_paths())  # what this machine gives a worker: as root, the namespaces
    assert result["isolation"]["pid_namespace"] == plan["pid_namespace"]
    assert result["isolation"]["mount_namespace"] == plan["mount_namespace"]


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_serve_validates_the_example_for_a_real_stdio_client(install, tmp_path):
    args = [*install.command[1:], "serve", "--workspace", str(EXAMPLE.parent), "--state-dir", str(tmp_path / "state")]
    params = StdioServerParameters(command=install.command[0], args=args, env=install.env, cwd=str(tmp_path))
    async with Client(params) as client:
        result = await client.call_tool(
            "validate", {"op": "rms_norm", "path": EXAMPLE.name, "shapes": ["smoke"], "seeds": 1}
        )
    assert not result.is_error, result.content
    v = result.structured_content
    assert v["compiled"] and v["passed"] == 1 and v["failed"] == 0, v
