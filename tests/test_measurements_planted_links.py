"""The planted-links script (measurements/planted_links_gpu.py), its eval step on CPU: a kernel that
links tmp/ncu.csv, scratch entries and the Triton cache to a file outside scratch, then aborts on
the first shape, leaves the file as it was, unquoted, and the next shape judged by a new worker."""

from __future__ import annotations

import os

import pytest

import measurements_support  # noqa: F401  (puts measurements/ on the path)
from atrex_mcp.problemset.catalog import Catalog
from eval_support import make_problem_root
from measurements import planted_links_gpu

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the CPU dry run")


def test_the_eval_step_holds_and_records_what_was_planted(tmp_path):
    catalog = Catalog(make_problem_root(tmp_path / "problems"))
    found = planted_links_gpu.step_eval(catalog, tmp_path / "eval")
    assert found["held"], found
    assert found["planted"]["ncu log"] == "done" and found["planted"]["read target"] != "done"
    assert [s["correct"] for s in found["shapes"]] == [False, True] and found["restarts"] >= 1
    assert found["target_before"] == found["target_after"] and not found["quoted"]
