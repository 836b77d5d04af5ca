"""tools/import_graph.py as a user runs it: on a small package whose shape is known, on a
committed revision, and on atrex_mcp itself (whose rooms must not import each other in a circle)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "import_graph.py"

LONGEST_BODY = "\n".join(f"        x{i} = {i}" for i in range(30))
SYNTHETIC = {
    "shop/__init__.py": "",
    # a -> sub -> c -> a: a circle, closed by an import inside a function
    "shop/a.py": "from shop.sub import inner\n\n\ndef short():\n    return inner\n",
    "shop/sub/__init__.py": "",
    "shop/sub/inner.py": "from .. import c\n",
    "shop/c.py": "import shop.e\n\n\ndef late():\n    import shop.a\n    return shop.a\n",
    # d: a TYPE_CHECKING import of a (no arrow), a runtime import of e in the else branch
    "shop/d.py": textwrap.dedent("""\
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from shop import a
        else:
            from shop import e


        class Counter:
            def tally(self):
        """)
    + LONGEST_BODY
    + "\n",
    "shop/e.py": "VALUE = '" + "x" * 130 + "'\nimport cage.worker\n",
    # a neighbour package outside shop/: imported by e; one of its modules imports e back
    "cage/__init__.py": "",
    "cage/worker.py": "import json\n",
    "cage/spy.py": "from shop import e\n",
    "shop/templates/not_a_module.py": "import shop.a\n",
    "measurements/INDEX.md": "index\n",
    "measurements/results/q/2026_h200.md": "result\n",
}


def write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def run_graph(*args: str) -> tuple[str, dict]:
    out = Path(args[args.index("--root") + 1]) / "graph.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout, json.loads(out.read_text())


def test_synthetic_package_rooms_floors_arrows_circle(tmp_path):
    write_tree(tmp_path, SYNTHETIC)
    table, report = run_graph("--root", str(tmp_path), "--package", "shop")
    summary = report["summary"]
    rooms = {row["room"]: row for row in report["rooms"]}
    assert set(rooms) == {"__init__", "a", "sub", "c", "d", "e"}  # templates/ has no __init__.py
    assert rooms["sub"]["kind"] == "package" and rooms["sub"]["files"] == 2
    arrows = {(a["from"], a["to"]) for a in report["arrows"]}
    assert arrows == {("a", "sub"), ("sub", "c"), ("c", "e"), ("c", "a"), ("d", "e")}
    assert report["type_checking_arrows"] == [{"from": "d", "to": "a"}]
    assert summary["type_checking_only_arrows"] == 1
    # e on floor 0; the circle (a, sub, c) and d on floor 1
    assert {room: row["floor"] for room, row in rooms.items()} == {
        "__init__": 0,
        "e": 0,
        "a": 1,
        "sub": 1,
        "c": 1,
        "d": 1,
    }
    assert summary["floors"] == 2
    [circle] = report["circles"]
    assert circle["rooms"] == ["a", "c", "sub"]
    closing = {(e["from"], e["to"], e["at"], e["deferred"]) for e in circle["edges"]}
    assert closing == {
        ("shop.a", "shop.sub.inner", "shop/a.py:1", False),
        ("shop.sub.inner", "shop.c", "shop/sub/inner.py:1", False),
        ("shop.c", "shop.a", "shop/c.py:5", True),
    }
    assert summary["import_time_circles"] == 0  # the circle closes only inside a function
    assert report["longest_functions"][0] == {"name": "Counter.tally", "path": "shop/d.py", "line": 10, "lines": 31}
    assert report["lines_over_120"]["package"] == [{"path": "shop/e.py", "line": 1, "chars": 140}]
    assert report["measurement_record"] == {"folder": "measurements", "files": 2}
    cage = report["neighbours"]["cage"]
    assert cage["imported_by_rooms"] == {"e": ["cage.worker"]}
    assert cage["imports_rooms"] == ["e"] and cage["imports_of_the_package"][0]["at"] == "cage/spy.py:1"
    assert "circle: a <-> c <-> sub" in table and "Counter.tally" in table


def test_rev_reads_the_committed_tree_not_the_working_tree(tmp_path):
    write_tree(tmp_path, SYNTHETIC)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "shop"], check=True)
    (tmp_path / "shop" / "c.py").write_text("import shop.e\n")  # the working tree drops the circle
    _, committed = run_graph("--root", str(tmp_path), "--package", "shop", "--rev", "HEAD")
    _, working = run_graph("--root", str(tmp_path), "--package", "shop")
    assert committed["revision"] == "HEAD" and committed["summary"]["circles"] == 1
    assert working["summary"]["circles"] == 0


def test_bad_revision_is_one_line_naming_the_fix(tmp_path):
    write_tree(tmp_path, SYNTHETIC)
    subprocess.run(["git", "-C", str(tmp_path), "init", "-q"], check=True)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(tmp_path), "--package", "shop", "--rev", "no-such-commit"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().startswith("import_graph: git archive no-such-commit failed")


@pytest.fixture(scope="module")
def real_package(tmp_path_factory):
    root = tmp_path_factory.mktemp("graph")
    out = root / "graph.json"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(ROOT), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.read_text())


def test_real_package_is_drawn(real_package):
    rooms = {row["room"] for row in real_package["rooms"]}
    assert {"problemset", "evaluate", "policy", "server", "runs", "agentbench"} <= rooms
    assert real_package["measurement_record"]["folder"] == "measurements"
    assert real_package["unreadable"] == []


def test_sandbox_imports_nothing_of_the_package(real_package):
    sandbox = real_package["neighbours"]["sandbox"]
    assert sandbox["imports_of_the_package"] == []
    assert "evaluate" in sandbox["imported_by_rooms"]


def test_no_circle_among_rooms(real_package):
    """Rooms import downwards only (docs/DESIGN.md, No circles): no circle among the rooms, counting
    imports inside functions, and none among the modules."""
    closing = [(c["rooms"], [(e["from"], e["to"], e["at"]) for e in c["edges"]]) for c in real_package["circles"]]
    assert closing == []
    assert real_package["summary"]["circles"] == 0 and real_package["summary"]["import_time_circles"] == 0
    assert real_package["module_circles"] == []
