"""The shape of a package drawn from its imports: rooms, floors, arrows, circles.

A *room* is a top-level module or subpackage of the package (a subpackage counts as one room).
An *arrow* is a distinct room -> room runtime import; imports under ``if TYPE_CHECKING:`` are
listed apart because they never run. *Floors* are the layers of the room graph's condensation
(floor 0 imports no other room; a room sits one floor above the highest room it imports).
A *circle* is a strongly connected component of more than one room, reported with the
module-level edges (file:line) that close it.

Standard library only, so it reads any commit: ``--rev COMMIT`` extracts that commit's tree
with ``git archive`` into a temporary folder, which makes before/after comparisons one command
each. ``python3 tools/import_graph.py --root . [--package atrex_mcp] [--rev COMMIT] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

LONG_LINE = 120
LONGEST_FUNCTIONS = 10
MEASUREMENT_RECORDS = ("measurements", "bench")
SKIPPED_DIRS = {"__pycache__", ".git", "node_modules", ".venv", "venv", "build", "dist"}


@dataclass(frozen=True)
class ImportEdge:
    """One import statement's resolved target, where it was written, and whether it runs."""

    source: str
    target: str
    path: str
    line: int
    type_checking: bool
    deferred: bool


@dataclass
class PackageScan:
    """Everything read from one package's files."""

    package: str
    modules: dict[str, Path] = field(default_factory=dict)
    edges: list[ImportEdge] = field(default_factory=list)
    functions: list[dict] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)
    long_lines: list[dict] = field(default_factory=list)
    outside_edges: list[dict] = field(default_factory=list)
    unreadable: list[dict] = field(default_factory=list)


def find_modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file for every .py file reachable through ``__init__.py`` chains."""
    base = root / package
    if not (base / "__init__.py").is_file():
        raise SystemExit(f"import_graph: {base} is not a package (no __init__.py); pass --root/--package")
    modules: dict[str, Path] = {}

    def walk(folder: Path, dotted: str) -> None:
        for entry in sorted(folder.iterdir()):
            if entry.is_dir():
                if entry.name not in SKIPPED_DIRS and (entry / "__init__.py").is_file():
                    walk(entry, f"{dotted}.{entry.name}")
            elif entry.suffix == ".py":
                name = dotted if entry.name == "__init__.py" else f"{dotted}.{entry.stem}"
                modules[name] = entry

    walk(base, package)
    return modules


def room_of(module: str, package: str) -> str:
    """The room a dotted module name belongs to (``__init__`` for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == package else "__init__"


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _deepest_module(dotted: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``dotted`` that is a module of the scanned package."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _import_targets(
    node: ast.Import | ast.ImportFrom, module: str, is_init: bool, modules: dict[str, Path]
) -> list[str]:
    """The package's modules an import statement loads (outside modules are dropped)."""
    if isinstance(node, ast.Import):
        found = (_deepest_module(alias.name, modules) for alias in node.names)
        return [target for target in found if target]
    if node.level:
        package_parts = module.split(".") if is_init else module.split(".")[:-1]
        keep = len(package_parts) - (node.level - 1)
        if keep <= 0:
            return []
        base = ".".join(package_parts[:keep] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    targets = []
    for alias in node.names:
        found = _deepest_module(f"{base}.{alias.name}", modules) if alias.name != "*" else None
        found = found or _deepest_module(base, modules)
        if found:
            targets.append(found)
    return targets


class _ModuleReader(ast.NodeVisitor):
    """Collects one module's imports (with their guard and depth) and its functions."""

    def __init__(self, module: str, is_init: bool, modules: dict[str, Path], rel: str, outside: frozenset[str]):
        self.module, self.is_init, self.modules, self.rel, self.outside = module, is_init, modules, rel, outside
        self.edges: list[ImportEdge] = []
        self.outside_edges: list[dict] = []
        self.functions: list[dict] = []
        self._scope: list[str] = []
        self._type_checking = 0
        self._function_depth = 0

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._type_checking += 1
            for child in node.body:
                self.visit(child)
            self._type_checking -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def _record_import(self, node: ast.Import | ast.ImportFrom) -> None:
        for target in dict.fromkeys(_import_targets(node, self.module, self.is_init, self.modules)):
            if target != self.module:
                self.edges.append(
                    ImportEdge(
                        self.module, target, self.rel, node.lineno, self._type_checking > 0, self._function_depth > 0
                    )
                )
        if isinstance(node, ast.ImportFrom) and node.level:
            return
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:  # the module or the module's attribute; the caller trims to what exists
            names = [f"{node.module}.{alias.name}" if alias.name != "*" else node.module for alias in node.names]
        for name in dict.fromkeys(names):
            if name.split(".")[0] in self.outside:
                self.outside_edges.append(
                    {
                        "from": self.module,
                        "to": name,
                        "at": f"{self.rel}:{node.lineno}",
                        "type_checking": self._type_checking > 0,
                    }
                )

    visit_Import = _record_import
    visit_ImportFrom = _record_import

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scope.append(node.name)
        self.generic_visit(node)
        self._scope.pop()

    def _record_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        name = ".".join([*self._scope, node.name])
        self.functions.append(
            {"name": name, "path": self.rel, "line": node.lineno, "lines": node.end_lineno - node.lineno + 1}
        )
        self._scope.append(node.name)
        self._function_depth += 1
        self.generic_visit(node)
        self._function_depth -= 1
        self._scope.pop()

    visit_FunctionDef = _record_function
    visit_AsyncFunctionDef = _record_function


def scan_package(root: Path, package: str, outside: frozenset[str] = frozenset()) -> PackageScan:
    """Read every module of ``package`` under ``root``: imports, functions, line counts, and
    its imports of the packages named in ``outside``."""
    scan = PackageScan(package, find_modules(root, package))
    for module, path in scan.modules.items():
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines()
        scan.lines[module] = len(lines)
        scan.long_lines.extend(
            {"path": rel, "line": number, "chars": len(line)}
            for number, line in enumerate(lines, 1)
            if len(line) > LONG_LINE
        )
        try:
            tree = ast.parse(text, filename=rel)
        except SyntaxError as error:
            scan.unreadable.append({"path": rel, "error": f"{error.msg} (line {error.lineno})"})
            continue
        reader = _ModuleReader(module, path.name == "__init__.py", scan.modules, rel, outside)
        reader.visit(tree)
        scan.edges.extend(reader.edges)
        scan.outside_edges.extend(reader.outside_edges)
        scan.functions.extend(reader.functions)
    return scan


def strongly_connected(nodes: list[str], arrows: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, each sorted, in reverse topological order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(arrows.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(nodes) + 100))
    try:
        for node in sorted(nodes):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return components


def floors_of(nodes: list[str], arrows: dict[str, set[str]]) -> dict[str, int]:
    """Longest-path depth of each node in the condensation (a node importing nothing: floor 0)."""
    components = strongly_connected(nodes, arrows)
    component_of = {member: number for number, members in enumerate(components) for member in members}
    floor: dict[int, int] = {}
    for number, members in enumerate(components):  # reverse topological: what it imports comes first
        below = {component_of[nxt] for member in members for nxt in arrows.get(member, ())} - {number}
        floor[number] = 1 + max((floor[other] for other in below), default=-1)
    return {node: floor[component_of[node]] for node in nodes}


def measurement_record(root: Path) -> dict:
    """Files under the measurement record folder, whichever of its names this tree uses."""
    for name in MEASUREMENT_RECORDS:
        folder = root / name
        if folder.is_dir():
            files = [p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
            return {"folder": name, "files": len(files)}
    return {"folder": None, "files": 0}


def tree_long_lines(root: Path) -> dict[str, int]:
    """Lines over the limit in every .py file of the tree, by top-level folder."""
    counts: dict[str, int] = defaultdict(int)
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if SKIPPED_DIRS.intersection(rel.parts):
            continue
        top = rel.parts[0] if len(rel.parts) > 1 else "."
        with path.open(encoding="utf-8", errors="replace") as handle:
            counts[top] += sum(1 for line in handle if len(line.rstrip("\r\n")) > LONG_LINE)
    return dict(sorted(counts.items()))


def neighbour_packages(root: Path, package: str) -> list[str]:
    """The tree's other top-level packages (``tests`` aside): the rooms' neighbours outside."""
    return sorted(
        d.name
        for d in root.iterdir()
        if d.is_dir() and d.name not in (package, "tests") and (d / "__init__.py").is_file()
    )


def neighbours_report(root: Path, package: str, scan: PackageScan) -> dict[str, dict]:
    """Per neighbour package: which rooms import it (runtime), and which rooms it imports back."""
    report = {}
    for name in neighbour_packages(root, package):
        neighbour = scan_package(root, name, frozenset({package}))
        into: dict[str, set[str]] = defaultdict(set)
        for edge in scan.outside_edges:
            target = _deepest_module(edge["to"], neighbour.modules)
            if target and not edge["type_checking"]:
                into[room_of(edge["from"], package)].add(target)
        back = [
            {**edge, "to": _deepest_module(edge["to"], scan.modules) or package} for edge in neighbour.outside_edges
        ]
        report[name] = {
            "imported_by_rooms": {room: sorted(targets) for room, targets in sorted(into.items())},
            "imports_rooms": sorted({room_of(edge["to"], package) for edge in back}),
            "imports_of_the_package": back,
        }
    return report


def describe(root: Path, package: str = "atrex_mcp") -> dict:
    """The whole report for one tree, as plain data (what ``--json`` writes)."""
    scan = scan_package(root, package, frozenset(neighbour_packages(root, package)))
    rooms = sorted({room_of(module, package) for module in scan.modules})
    runtime: dict[str, set[str]] = defaultdict(set)
    eager: dict[str, set[str]] = defaultdict(set)
    type_only: dict[str, set[str]] = defaultdict(set)
    closing: dict[tuple[str, str], list[ImportEdge]] = defaultdict(list)
    for edge in scan.edges:
        source, target = room_of(edge.source, package), room_of(edge.target, package)
        if source == target:
            continue
        (type_only if edge.type_checking else runtime)[source].add(target)
        if not edge.type_checking:
            closing[source, target].append(edge)
            if not edge.deferred:
                eager[source].add(target)
    arrows = sorted((source, target) for source, targets in runtime.items() for target in targets)
    type_checking_arrows = sorted(
        (source, target) for source, targets in type_only.items() for target in targets if target not in runtime[source]
    )
    floors = floors_of(rooms, runtime)
    circles = []
    for members in strongly_connected(rooms, runtime):
        if len(members) > 1:
            inside = set(members)
            edges = [
                {"from": e.source, "to": e.target, "at": f"{e.path}:{e.line}", "deferred": e.deferred}
                for (source, target), found in sorted(closing.items())
                if source in inside and target in inside
                for e in found
            ]
            circles.append({"rooms": members, "edges": edges})
    import_time_circles = [members for members in strongly_connected(rooms, eager) if len(members) > 1]
    module_arrows: dict[str, set[str]] = defaultdict(set)
    for edge in scan.edges:
        if not edge.type_checking:
            module_arrows[edge.source].add(edge.target)
    module_circles = [members for members in strongly_connected(list(scan.modules), module_arrows) if len(members) > 1]
    per_room: dict[str, dict] = {room: {"files": 0, "lines": 0} for room in rooms}
    for module, count in scan.lines.items():
        per_room[room_of(module, package)]["files"] += 1
        per_room[room_of(module, package)]["lines"] += count
    imported_by: dict[str, set[str]] = defaultdict(set)
    for source, target in arrows:
        imported_by[target].add(source)
    room_rows = [
        {
            "room": room,
            "kind": "package" if (root / package / room).is_dir() else "module",
            "floor": floors[room],
            **per_room[room],
            "imports": sorted(runtime[room]),
            "imported_by": sorted(imported_by[room]),
        }
        for room in rooms
    ]
    longest = sorted(scan.functions, key=lambda f: (-f["lines"], f["path"], f["line"]))[:LONGEST_FUNCTIONS]
    return {
        "package": package,
        "summary": {
            "rooms": len(rooms),
            "floors": 1 + max(floors.values(), default=-1),
            "arrows": len(arrows),
            "type_checking_only_arrows": len(type_checking_arrows),
            "circles": len(circles),
            "import_time_circles": len(import_time_circles),
            "module_circles": len(module_circles),
            "files": len(scan.modules),
            "lines": sum(scan.lines.values()),
            "package_lines_over_120": len(scan.long_lines),
            "tree_lines_over_120": sum(tree_long_lines(root).values()),
            "measurement_record_files": measurement_record(root)["files"],
        },
        "rooms": room_rows,
        "arrows": [{"from": source, "to": target} for source, target in arrows],
        "type_checking_arrows": [{"from": source, "to": target} for source, target in type_checking_arrows],
        "circles": circles,
        "import_time_circles": import_time_circles,
        "module_circles": module_circles,
        "neighbours": neighbours_report(root, package, scan),
        "measurement_record": measurement_record(root),
        "longest_functions": longest,
        "lines_over_120": {"package": scan.long_lines, "tree_by_folder": tree_long_lines(root)},
        "unreadable": scan.unreadable,
    }


def extract_revision(repo: Path, revision: str, into: Path) -> None:
    """Write ``revision``'s tree under ``into`` (``git archive``, nothing checked out in ``repo``)."""
    result = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", revision], capture_output=True, check=False
    )
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip().splitlines()
        raise SystemExit(
            f"import_graph: git archive {revision} failed: {message[-1] if message else 'no output'}"
            " (pass a commit of the repository at --root)"
        )
    with tarfile.open(fileobj=io.BytesIO(result.stdout)) as archive:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: no member may land outside `into`
            archive.extractall(into, filter="data")
        else:
            archive.extractall(into)


def render(report: dict, label: str) -> str:
    """The short human table: summary, rooms by floor, circles, longest functions."""
    s = report["summary"]
    record = report["measurement_record"]
    out = [
        f"{label} ({report['package']}/)",
        (
            f"  rooms {s['rooms']}, floors {s['floors']}, arrows {s['arrows']} "
            f"(+{s['type_checking_only_arrows']} under TYPE_CHECKING only)"
        ),
        (
            f"  circles among rooms {s['circles']} ({s['import_time_circles']} without the imports inside "
            f"functions), among modules {s['module_circles']}"
        ),
        (
            f"  files {s['files']}, lines {s['lines']}; lines over {LONG_LINE} chars: "
            f"{s['package_lines_over_120']} in the package, {s['tree_lines_over_120']} in the tree's .py files"
        ),
        f"  measurement record: {record['folder'] or 'none'}/ with {s['measurement_record_files']} files",
        "",
        f"{'floor':>5}  {'room':<20} {'kind':<8} {'files':>5} {'lines':>6}  imports",
    ]
    for row in sorted(report["rooms"], key=lambda r: (-r["floor"], r["room"])):
        out.append(
            f"{row['floor']:>5}  {row['room']:<20} {row['kind']:<8} {row['files']:>5} {row['lines']:>6}  "
            + (", ".join(row["imports"]) or "-")
        )
    for circle in report["circles"]:
        out += ["", "circle: " + " <-> ".join(circle["rooms"])]
        out += [
            f"  {e['from']} -> {e['to']}  {e['at']}{'  (in a function)' if e['deferred'] else ''}"
            for e in circle["edges"]
        ]
    for members in report["module_circles"]:
        out.append("module circle: " + " <-> ".join(members))
    for name, neighbour in report["neighbours"].items():
        users = ", ".join(neighbour["imported_by_rooms"]) or "no room"
        back = ", ".join(neighbour["imports_rooms"]) or "none"
        out += ["", f"{name}/ (outside {report['package']}/): imported by {users}; imports of its rooms: {back}"]
    out += ["", "longest functions:"]
    out += [f"  {f['lines']:>4}  {f['path']}:{f['line']}  {f['name']}" for f in report["longest_functions"]]
    out += [f"unreadable: {u['path']}: {u['error']}" for u in report["unreadable"]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root (default: .)")
    parser.add_argument("--package", default="atrex_mcp", help="the package whose rooms are drawn")
    parser.add_argument("--rev", help="read this commit's tree from git instead of the working tree")
    parser.add_argument("--json", type=Path, help="also write the full report as JSON here")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if not root.is_dir():
        parser.error(f"--root {root} is not a folder")
    with tempfile.TemporaryDirectory(prefix="import_graph_") as scratch:
        tree = root
        if args.rev:
            tree = Path(scratch)
            extract_revision(root, args.rev, tree)
        report = describe(tree, args.package)
    report["revision"] = args.rev or "working tree"
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(render(report, args.rev or str(root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
