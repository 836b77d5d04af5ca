"""`package` and `package_run` against planted links and races: a link or hard link planted in
the output folder, an output folder that is a link or a file, a folder swapped for a link while
the artifact is written. The served problem files are never touched and nothing is created
outside the workspace."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from pathlib import Path

import pytest

from atrex_mcp.errors import AtrexError
from atrex_mcp.package import package_source
from atrex_mcp.paths import REPO_ROOT, problems_dir
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.workspace import Workspace
from tests.runs_fixtures import loop_with_iterations
from tests.server_fixtures import config, connect

pytestmark = pytest.mark.anyio
OP = "rms_norm"
KERNEL = (REPO_ROOT / "examples" / "rms_norm_triton.py").read_text()


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _tree(root: Path) -> dict[str, str]:
    """Every entry under `root` with a digest of its content (links as their target)."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            found[str(path)] = "link:" + os.readlink(path)
        elif path.is_file():
            found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[str(path)] = "dir"
    return found


@pytest.fixture
def served(tmp_path):
    """A server serving a copy of the problem set, its workspace holding the kernel."""
    problems = tmp_path / "served"
    shutil.copytree(problems_dir() / OP, problems / OP)
    shutil.copy(problems_dir() / "weights.json", problems / "weights.json")
    cfg = config(tmp_path, problems=[problems])
    (cfg.workspaces[0] / "kernel.py").write_text(KERNEL)
    return cfg, problems


async def _package(cfg, out_dir: str) -> tuple[bool, str]:
    async with connect(cfg) as client:
        result = await client.call_tool("package", {"op": OP, "path": "kernel.py", "out_dir": out_dir})
    return result.is_error, result.content[0].text


async def test_a_link_planted_as_the_artifact_is_not_written_through(served, tmp_path):
    cfg, problems = served
    trap = cfg.workspaces[0] / "trap"
    trap.mkdir()
    (trap / f"{OP}.py").symlink_to(problems / OP / "reference.py")
    (tmp_path / "state").mkdir()
    before, outside = _tree(problems), sorted(p.name for p in tmp_path.iterdir())
    is_error, text = await _package(cfg, "trap")
    assert is_error and "category: output_is_a_link" in text and "internal" not in text, text
    assert _tree(problems) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == outside
    assert not (trap / "manifest.json").exists()


async def test_a_link_planted_as_the_manifest_is_not_written_through(served):
    cfg, problems = served
    trap = cfg.workspaces[0] / "trap"
    trap.mkdir()
    (trap / "manifest.json").symlink_to(problems / OP / "metadata.json")
    before = _tree(problems)
    is_error, text = await _package(cfg, "trap")
    assert is_error and "category: output_is_a_link" in text, text
    assert _tree(problems) == before


async def test_a_hard_link_planted_as_the_artifact_only_loses_its_name(served):
    cfg, problems = served
    trap = cfg.workspaces[0] / "trap"
    trap.mkdir()
    reference = problems / OP / "reference.py"
    os.link(reference, trap / f"{OP}.py")
    before = _tree(problems)
    is_error, text = await _package(cfg, "trap")
    assert not is_error, text
    assert _tree(problems) == before and reference.stat().st_nlink == 1
    written = trap / f"{OP}.py"
    assert "@triton.jit" in written.read_text() and written.stat().st_ino != reference.stat().st_ino


@pytest.mark.parametrize("target", ["problem", "problem_root", "elsewhere_in_workspace"])
async def test_an_output_folder_that_is_a_link_is_refused(served, tmp_path, target):
    cfg, problems = served
    workspace = cfg.workspaces[0]
    (workspace / "real").mkdir()
    where = {"problem": problems / OP, "problem_root": problems, "elsewhere_in_workspace": workspace / "real"}[target]
    (workspace / "out").symlink_to(where)
    before = _tree(problems)
    is_error, text = await _package(cfg, "out")
    assert is_error and "category: path_outside_workspace" in text, text
    assert _tree(problems) == before and list((workspace / "real").iterdir()) == []


async def test_a_folder_below_a_link_into_the_problems_is_refused(served):
    cfg, problems = served
    (cfg.workspaces[0] / "link").symlink_to(problems)
    before = _tree(problems)
    is_error, text = await _package(cfg, "link/new_op")
    assert is_error and "category: path_outside_workspace" in text, text
    assert _tree(problems) == before


@pytest.mark.parametrize("out_dir", ["a_file.py", "a_file.py/below"])
async def test_an_output_folder_that_is_a_file_is_a_clear_input_error(served, out_dir):
    cfg, _ = served
    (cfg.workspaces[0] / "a_file.py").write_text("x = 1\n")
    is_error, text = await _package(cfg, out_dir)
    assert is_error and "stage: input" in text and "category: output_not_a_folder" in text, text
    assert "unexpected" not in text and (cfg.workspaces[0] / "a_file.py").read_text() == "x = 1\n"


async def test_repackaging_into_its_own_folder_replaces_the_files(served):
    cfg, _ = served
    assert not (await _package(cfg, "pkg"))[0]
    is_error, text = await _package(cfg, "pkg")
    assert not is_error, text
    assert sorted(p.name for p in (cfg.workspaces[0] / "pkg").iterdir()) == ["manifest.json", f"{OP}.py"]


def test_a_folder_swapped_for_a_link_after_the_check_is_not_followed(tmp_path):
    """The race: the folder passes the workspace check, then becomes a link into the problems."""
    problems = tmp_path / "served"
    shutil.copytree(problems_dir() / OP, problems / OP)
    catalog = Catalog([problems])
    workspace = Workspace([tmp_path / "ws"], denied=catalog.roots)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "out").mkdir()
    target = workspace.output_path("out/inner")
    shutil.rmtree(tmp_path / "ws" / "out")
    (tmp_path / "ws" / "out").symlink_to(problems / OP)
    before = _tree(problems)
    with pytest.raises(AtrexError) as err:
        package_source(KERNEL, OP, catalog, target)
    assert err.value.info.category == "output_is_a_link"
    assert _tree(problems) == before


def test_a_link_swapped_in_and_out_during_packaging_never_reaches_the_problems(tmp_path):
    """A second thread flips the output folder between a real folder and a link into the served
    problem while the server packages into it again and again."""
    problems = tmp_path / "served"
    shutil.copytree(problems_dir() / OP, problems / OP)
    catalog = Catalog([problems])
    (tmp_path / "ws").mkdir()
    workspace = Workspace([tmp_path / "ws"], denied=catalog.roots)
    out = tmp_path / "ws" / "out"
    before = _tree(problems)
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            try:
                if out.is_symlink():
                    out.unlink()
                    out.mkdir()
                else:
                    shutil.rmtree(out, ignore_errors=True)
                    out.symlink_to(problems / OP)
            except OSError:
                pass

    flipper = threading.Thread(target=flip)
    flipper.start()
    outcomes = set()
    try:
        for _ in range(150):
            try:
                package_source(KERNEL, OP, catalog, workspace.output_path("out"))
                outcomes.add("written")
            except AtrexError as exc:
                outcomes.add(exc.info.category)
    finally:
        stop.set()
        flipper.join()
    assert _tree(problems) == before
    # every refusal a race can produce is fine; what matters is the unchanged problem above
    assert outcomes <= {
        "written",
        "output_is_a_link",
        "path_outside_workspace",
        "output_dir_not_empty",
        "output_raced",
        "output_unwritable",
        "file_not_found",
    }


def test_package_run_refuses_a_planted_link_too(tmp_path):
    service, run_id = loop_with_iterations(tmp_path, speeds=[1.3])
    served = service.catalog.problem_dir("rms_norm")
    trap = tmp_path / "trap"
    trap.mkdir()
    (trap / "rms_norm.py").symlink_to(served / "reference.py")
    before = _tree(served)
    with pytest.raises(AtrexError) as err:
        service.package(run_id, trap)
    assert err.value.info.category == "output_is_a_link" and _tree(served) == before
    with pytest.raises(AtrexError) as err:
        service.package(run_id, served / "packaged")
    assert err.value.info.category == "path_outside_workspace" and not (served / "packaged").exists()
