"""JSON forms of `atrex-mcp problems ...` and `atrex-mcp roofline ...`."""

import json

import pytest

from atrex_mcp.cli import main
from atrex_mcp.problemset.hardware import load_profile
from atrex_mcp.problemset.roofline import Workload, t_sol_ms
from tests.problemset_fixtures import make_problem


def run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_problems_list_json(capsys):
    rows = run_json(capsys, "problems", "list", "--json")
    assert {tuple(sorted(r)) for r in rows} == {("dtype", "name", "num_shapes", "phase", "weight")}
    by_name = {r["name"]: r for r in rows}
    assert by_name["rms_norm"]["num_shapes"] == 56 and by_name["moe_align_block_size"]["dtype"] == "int32"
    assert sum(r["weight"] for r in rows) == pytest.approx(1.0)


def test_roofline_json_on_two_profiles(capsys):
    rows = run_json(capsys, "roofline", "rms_norm", "--hardware", "h200", "--json")
    first = rows[0]
    assert first == {
        "shape_id": "0",
        "flops": 3 * 2500 * 1024 + 2500,
        "bytes_read": 2 * 2500 * 1024 + 2048,
        "bytes_written": 2 * 2500 * 1024,
        "t_sol_ms": 1000 * (4 * 2500 * 1024 + 2048) / 4.8e12,
        "bound": "memory",
    }
    xpu = run_json(capsys, "roofline", "rms_norm", "--hardware", "xpu-a", "--json")[0]
    assert xpu["t_sol_ms"] == t_sol_ms(
        Workload(flops={"bf16": first["flops"]}, bytes_read=first["bytes_read"], bytes_written=first["bytes_written"]),
        load_profile("xpu-a"),
    )


def test_roofline_unknown_hardware_is_an_input_error(capsys):
    assert main(["roofline", "rms_norm", "--hardware", "h999", "--json"]) == 2
    assert "unknown_hardware" in capsys.readouterr().err


def test_problems_show_json_hidden_only_on_request(capsys):
    doc = run_json(capsys, "problems", "show", "silu_and_mul", "--json")
    assert set(doc) == {"name", "shapes", "reference.py", "input.py"}
    doc = run_json(capsys, "problems", "show", "silu_and_mul", "--json", "--hidden")
    assert doc["metadata"]["op"] == "silu_and_mul" and "0" in doc["roofline"]["shapes"]


def test_problems_check_json(capsys):
    results = run_json(capsys, "problems", "check", "rms_norm", "moe_align_block_size", "--json")
    assert [r["op"] for r in results] == ["rms_norm", "moe_align_block_size"] and all(r["passed"] for r in results)


def test_problems_add_then_list_a_user_root(capsys, tmp_path):
    src = make_problem(tmp_path / "mine")
    assert main(["problems", "add", str(src), "--into", str(tmp_path / "root")]) == 0
    capsys.readouterr()
    rows = run_json(capsys, "problems", "--root", str(tmp_path / "root"), "list", "--json")
    assert rows == [{"name": "gated_proj", "num_shapes": 2, "weight": 1.0, "dtype": "bf16", "phase": "unknown"}]
    roof = run_json(capsys, "roofline", "gated_proj", "--root", str(tmp_path / "root"), "--json")
    assert [r["shape_id"] for r in roof] == ["a", "b"]


def test_problems_list_derives_a_folder_never_added_as_an_explicit_step(capsys, tmp_path):
    """A set with only visible files (as a trace snapshot writes it): `list` runs the derive step first."""
    folder = make_problem(tmp_path / "set")
    assert not (folder / "metadata.json").exists()
    rows = run_json(capsys, "problems", "list", "--problems", str(tmp_path / "set"), "--json")
    assert rows == [{"name": "gated_proj", "num_shapes": 2, "weight": 0.0, "dtype": "bf16", "phase": "unknown"}]
    assert (folder / "metadata.json").is_file() and (folder / "roofline.json").is_file()
