"""The judge and the sandbox worker speak the messages of sandbox/messages.py: every handler of
the worker reads only the fields its request class declares and returns only the keys its reply
type declares, the trusted side builds every request through those classes, and no module
outside sandbox/ reaches into the sandbox's private names."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from pathlib import Path

import pytest

from sandbox import messages, worker

ROOT = Path(__file__).resolve().parent.parent
HANDLED = [r for r in messages.REQUESTS if r is not messages.ExitRequest]


def _handler_tree(command: str) -> ast.FunctionDef:
    source = textwrap.dedent(inspect.getsource(getattr(worker.Worker, command)))
    return ast.parse(source).body[0]


def _keys_read(function: ast.FunctionDef) -> set[str]:
    """Keys the handler reads from its request (`msg["k"]`, `msg.get("k")`)."""
    keys = set()
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "msg"
            and isinstance(node.slice, ast.Constant)
        ):
            keys.add(node.slice.value)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "msg"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            keys.add(node.args[0].value)
    return keys


def _own_nodes(function: ast.FunctionDef):
    """The handler's nodes, without those of functions nested in it."""
    stack = [n for n in function.body if not isinstance(n, ast.FunctionDef)]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, (ast.FunctionDef, ast.Lambda)))


def _keys_returned(function: ast.FunctionDef) -> set[str]:
    keys = set()
    for node in _own_nodes(function):
        if isinstance(node, ast.Return) and node.value is not None:
            assert isinstance(node.value, ast.Dict), f"{function.name} returns something other than a dict literal"
            keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return keys


@pytest.mark.parametrize("request_type", HANDLED, ids=lambda r: r.command)
def test_each_handler_reads_its_request_fields_and_returns_its_reply_keys(request_type):
    handler = _handler_tree(request_type.command)
    fields = {f.name for f in dataclasses.fields(request_type)}
    assert _keys_read(handler) <= fields, f"{request_type.command} reads fields its request does not declare"
    reply = messages.REPLIES[request_type.command]
    assert _keys_returned(handler) <= set(reply.__annotations__), f"{request_type.command} returns undeclared keys"


def test_the_worker_serves_exactly_the_requests_declared():
    serve = _handler_tree("serve")
    table = next(
        node.value
        for node in ast.walk(serve)
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "handlers" for t in node.targets))
        or (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "handlers")
    )
    served = {key.value for key in table.keys}
    exits = {
        node.comparators[0].value
        for node in ast.walk(serve)
        if isinstance(node, ast.Compare) and isinstance(node.comparators[0], ast.Constant)
    }
    assert served == {r.command for r in HANDLED} and messages.ExitRequest.command in exits
    assert all(key.value == value.attr for key, value in zip(table.keys, table.values))


def test_a_request_goes_on_the_wire_with_its_command_and_every_field():
    request = messages.TimeRequest(
        shape={"id": "0", "init": {}, "inputs": {}},
        warmup_seed=1,
        seeds=[2, 3],
        min_calls=2,
        max_calls=2,
        flush_bytes=1 << 20,
    )
    assert request.wire() == {
        "cmd": "time",
        "shape": {"id": "0", "init": {}, "inputs": {}},
        "warmup_seed": 1,
        "seeds": [2, 3],
        "min_calls": 2,
        "max_calls": 2,
        "flush_bytes": 1 << 20,
        "fit_to_sets": False,
        "stop_relative": None,
    }
    assert messages.ExitRequest().wire() == {"cmd": "exit"}
    with pytest.raises(TypeError):
        messages.RunRequest(shape={"id": "0", "init": {}, "inputs": {}}, seed=1)  # arena_bytes missing


def _python_files(*folders: str) -> list[Path]:
    return [p for folder in folders for p in (ROOT / folder).rglob("*.py")]


def test_the_trusted_side_builds_every_request_through_a_message_class():
    """No `.call("cmd", {...})` / `.request("cmd", ...)` with a bare command name remains."""
    bare = []
    for path in _python_files("atrex_mcp", "sandbox"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("call", "request")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in {r.command for r in messages.REQUESTS}
            ):
                bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bare, bare


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_module_outside_the_sandbox_imports_its_private_names():
    found = []
    for path in _python_files("atrex_mcp", "tests", "bench", "measurements", "examples", "tools"):
        if not path.is_file():
            continue
        tree = ast.parse(path.read_text())
        modules: set[str] = set()  # local names bound to sandbox modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sandbox":
                for alias in node.names:
                    if _private(alias.name) or any(_private(part) for part in node.module.split(".")):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{alias.name}")
                    modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "sandbox":
                        if any(_private(part) for part in alias.name.split(".")):
                            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {alias.name}")
                        modules.add(alias.asname or alias.name.split(".")[0])
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                root = node.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and root.id in modules:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {root.id}….{node.attr}")
    assert not found, found
