"""One roofline function: every place that shows or scores a T_SOL gives shape_roofline's figure;
the stored T_SOL is checked against it; and the problem set reads without writing, with no import
circle (atrex_mcp.problemset)."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from atrex_mcp.commands.roofline import rows as roofline_rows
from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate import scoring
from atrex_mcp.evaluate.problem_check import check_problem
from atrex_mcp.paths import REPO_ROOT, problems_dir
from atrex_mcp.policy import Policy
from atrex_mcp.problemset.catalog import HIDDEN_FILES, VISIBLE_FILES, Catalog
from atrex_mcp.problemset.roofline import run_roofline, shape_roofline
from atrex_mcp.profiling.service import _shape_roofline as profile_roofline

PACKAGE = REPO_ROOT / "atrex_mcp" / "problemset"
# A few shapes of operators of several kinds: memory-bound norms, compute-bound GEMMs and attention
# (bf16 and fp8 peaks), an int op, an fp8 quantiser.
CASES = [
    ("rms_norm", "0"),
    ("rms_norm", "55"),
    ("silu_and_mul", "3"),
    ("linear_sigmoid_mul", "1"),
    ("unified_attention", "2"),
    ("unified_attention", "21"),
    ("block_scaled_mm", "1"),
    ("moe_align_block_size", "2"),
    ("per_token_group_quant_fp8", "4"),
]


@pytest.fixture(scope="module")
def catalog():
    return Catalog()


@pytest.mark.parametrize("hardware", ["h200", "h200-measured"])
def test_every_former_t_sol_site_gives_the_one_functions_figure(catalog, hardware):
    policy = Policy("optimize", catalog)
    bounds = set()
    for op, shape_id in CASES:
        one = shape_roofline(catalog.hidden(op), shape_id, hardware)
        bounds.add(one.bound)
        stored = catalog.hidden(op).roofline_entry(shape_id)  # the stored record
        assert (stored["t_sol_ms"][hardware], stored["bound"][hardware]) == (one.t_sol_ms, one.bound)
        assert one.t_sol_ms > 0 and one.bound in ("memory", "compute")
        view = policy.shape_roofline(op, shape_id, hardware)  # the agent's get_problem / roofline_lookup view
        assert (view.t_sol_ms, view.bound) == (one.t_sol_ms, one.bound)
        assert policy.shape_figures(op, shape_id, hardware) == one
        run = run_roofline(catalog.hidden(op), [shape_id], hardware)["shapes"][shape_id]  # a run's roofline
        assert run == one.summary() and run["t_sol_ms"] == one.t_sol_ms
        cli = {r.shape_id: r for r in roofline_rows(op, hardware)}[shape_id]  # atrex-mcp roofline
        assert (cli.t_sol_ms, cli.bound, cli.bytes_read, cli.bytes_written) == (
            one.t_sol_ms,
            one.bound,
            one.bytes_read,
            one.bytes_written,
        )
        assert scoring.Roofline.load(catalog, op, hardware).t_sol_ms(shape_id) == (one.t_sol_ms, "")  # scoring
        assert profile_roofline(catalog, op, shape_id, hardware) == one.summary()  # a profile report
    assert bounds == {"memory", "compute"}


def test_the_stored_t_sol_is_a_record_not_a_source(tmp_path):
    """Scoring follows W/Q and the profile, never the stored T_SOL; `problems check` names the disagreement."""
    root = tmp_path / "problems"
    shutil.copytree(problems_dir() / "rms_norm", root / "rms_norm")
    before = Catalog(root)
    truth = shape_roofline(before.hidden("rms_norm"), "0", "h200").t_sol_ms
    assert next(c for c in check_problem(before, "rms_norm").checks if c.name == "roofline").passed
    path = root / "rms_norm" / "roofline.json"
    doc = json.loads(path.read_text())
    doc["shapes"]["0"]["t_sol_ms"]["h200"] = truth / 2
    path.write_text(json.dumps(doc))
    tampered = Catalog(root)
    assert scoring.Roofline.load(tampered, "rms_norm", "h200").t_sol_ms("0") == (truth, "")
    check = next(c for c in check_problem(tampered, "rms_norm").checks if c.name == "roofline")
    assert not check.passed and "shape 0 on h200" in check.detail and "problems build" in check.detail


def test_a_missing_peak_or_shape_is_a_reason_not_a_score(catalog):
    value, reason = scoring.Roofline.load(catalog, "rms_norm", "h200").t_sol_ms("smoke")
    assert value is None and "no shape smoke" in reason
    value, reason = scoring.Roofline.load(catalog, "rms_norm", "no-such-profile").t_sol_ms("0")
    assert value is None and "no-such-profile" in reason and "h200" in reason


def test_the_catalog_reads_each_file_once_and_writes_nothing(tmp_path, monkeypatch):
    root = tmp_path / "problems"
    shutil.copytree(problems_dir() / "silu_and_mul", root / "silu_and_mul")
    shutil.copytree(problems_dir() / "rms_norm", root / "rms_norm", ignore=shutil.ignore_patterns(*HIDDEN_FILES))
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    reads: list[str] = []
    original = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: reads.append(self.name) or original(self, *a, **k))
    catalog = Catalog(root)
    for _ in range(3):
        catalog.visible("silu_and_mul"), catalog.hidden("silu_and_mul"), catalog.visible("rms_norm")
    assert sorted(reads) == sorted([*VISIBLE_FILES, *VISIBLE_FILES, *HIDDEN_FILES])
    with pytest.raises(AtrexError) as err:
        catalog.hidden("rms_norm")
    assert err.value.info.category == "hidden_files_missing"
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def _imports(path: Path) -> set[str]:
    """Every atrex_mcp.problemset module a file imports, at any depth of the file (lazy imports too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {
            n.removeprefix("atrex_mcp.problemset.")
            for n in names
            if n.startswith("atrex_mcp.problemset.") and (PACKAGE / f"{n.rsplit('.', 1)[-1]}.py").is_file()
        }
    return found


def test_the_problem_set_has_no_import_circle_and_the_catalog_only_reads():
    graph = {p.stem: _imports(p) - {p.stem} for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert {"catalog", "derive", "files", "roofline", "build", "template"} <= set(graph)
    assert graph["catalog"] == set(), graph["catalog"]  # neither derive nor the writers in files
    assert "derive" not in graph["roofline"] and "files" not in graph["roofline"]
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            assert state.get(nxt) != "open", f"import circle: {' -> '.join([*trail, node, nxt])}"
            if nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


def test_runs_hold_no_roofline():
    runs = REPO_ROOT / "atrex_mcp" / "runs"
    assert not (runs / "roofline_view.py").exists()
    for path in runs.glob("*.py"):
        assert "Workload" not in path.read_text() and "t_sol_ms(" not in path.read_text(), path.name
