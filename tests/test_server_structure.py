"""The shape the boundary and the server keep: atrex_mcp/policy.py is the only module that decides
what an agent sees (no other module passes reveal_ flags or makes its own Redactor), and the
server's parts are plain imports (no module looked up by name, no service fetched by string)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import atrex_mcp
from atrex_mcp.server import run_tools, tools
from atrex_mcp.server.app import ServerConfig, build_server

PACKAGE = Path(atrex_mcp.__file__).parent
POLICY = PACKAGE / "policy.py"


def _modules(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py"))


def _calls(tree: ast.AST, name: str) -> list[int]:
    """Lines where `name(...)` or `x.name(...)` is called."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == name)
            or (isinstance(node.func, ast.Attribute) and node.func.attr == name)
        )
    ]


def test_only_the_policy_decides_what_an_agent_sees():
    flags, redactors = [], []
    for path in _modules(PACKAGE):
        text = path.read_text()
        where = path.relative_to(PACKAGE.parent)
        if path != POLICY:
            flags += [f"{where}: {m}" for m in re.findall(r"\breveal_\w+", text)]
            redactors += [f"{where}:{line}" for line in _calls(ast.parse(text), "Redactor")]
    assert flags == [], "withholding flags outside atrex_mcp/policy.py"
    assert redactors == [], "a Redactor made outside atrex_mcp/policy.py"
    assert _calls(ast.parse(POLICY.read_text()), "Redactor"), "the policy makes the log redactor"


def test_the_server_looks_nothing_up_by_name():
    found = []
    for path in _modules(PACKAGE / "server"):
        tree = ast.parse(path.read_text())
        for name in ("import_module", "find_spec", "service", "__import__"):
            found += [f"{path.name}:{line} {name}()" for line in _calls(tree, name)]
        found += [
            f"{path.name}: imports importlib"
            for node in ast.walk(tree)
            if (
                isinstance(node, (ast.Import, ast.ImportFrom))
                and any(a.name.startswith("importlib") for a in node.names)
            )
            or (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("importlib"))
        ]
    assert found == []


def test_every_registered_tool_is_a_module_level_function_of_the_tool_lists(tmp_path):
    import anyio

    specs = {spec.fn.__name__: spec.fn for spec in (*tools.TOOLS, *run_tools.RUN_TOOLS)}
    assert all(
        fn.__qualname__ == fn.__name__ and fn.__module__ in (tools.__name__, run_tools.__name__)
        for fn in specs.values()
    )
    server = build_server(ServerConfig(state_dir=tmp_path / "state", workspaces=[tmp_path]))
    registered = {t.name for t in anyio.run(server.list_tools)}
    assert registered == set(specs)
