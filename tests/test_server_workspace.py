"""Path confinement: every way out of a workspace root is refused, and so is every way into
the problem set (hidden files) from inside one."""

import os
from pathlib import Path

import pytest

from atrex_mcp.errors import AtrexError
from atrex_mcp.workspace import Workspace


@pytest.fixture
def layout(tmp_path: Path):
    work = tmp_path / "work"
    problems = work / "problems" / "op"
    outside = tmp_path / "outside"
    for d in (work, problems, outside):
        d.mkdir(parents=True, exist_ok=True)
    (work / "kernel.py").write_text("x = 1\n")
    (problems / "roofline.json").write_text('{"t_sol_ms": 0.0123}')
    (outside / "secret.txt").write_text("secret")
    return work, problems.parent, outside


def refused(fn, *args, category="path_outside_workspace"):
    with pytest.raises(AtrexError) as err:
        fn(*args)
    assert err.value.info.category == category
    return str(err.value)


def test_reads_relative_and_absolute_paths_inside(layout):
    work, problems, _ = layout
    ws = Workspace([work], denied=[problems])
    assert ws.read_source("kernel.py") == "x = 1\n"
    assert ws.read_source(str(work / "kernel.py")) == "x = 1\n"
    (work / "sub").mkdir()
    assert ws.read_source("sub/../kernel.py") == "x = 1\n"


@pytest.mark.parametrize(
    "trick",
    [
        "../outside/secret.txt",
        "/etc/passwd",
        "problems/op/roofline.json",
        "problems/op/../op/roofline.json",
        "",
        "kernel.py\x00.txt",
    ],
)
def test_escapes_and_denied_paths_are_refused(layout, trick):
    work, problems, _ = layout
    ws = Workspace([work], denied=[problems])
    text = refused(ws.read_source, trick)
    assert "0.0123" not in text and "secret" not in text.replace(repr(trick), "")


def test_symlink_escape_and_symlink_into_hidden_are_refused(layout):
    work, problems, outside = layout
    (work / "out_link.py").symlink_to(outside / "secret.txt")
    (work / "hidden_link.py").symlink_to(problems / "op" / "roofline.json")
    (work / "dir_link").symlink_to(outside)
    ws = Workspace([work], denied=[problems])
    for trick in ("out_link.py", "hidden_link.py", "dir_link/secret.txt"):
        refused(ws.read_source, trick)


def test_symlink_inside_the_root_is_followed(layout):
    work, problems, _ = layout
    (work / "alias.py").symlink_to(work / "kernel.py")
    assert Workspace([work], denied=[problems]).read_source("alias.py") == "x = 1\n"


def test_size_limit_and_non_files(layout):
    work, problems, _ = layout
    (work / "big.py").write_text("#" * 2000)
    os.mkfifo(work / "pipe.py")
    ws = Workspace([work], denied=[problems], max_source_bytes=1000)
    assert "2000 bytes" in refused(ws.read_source, "big.py", category="source_too_large")
    refused(ws.check_source, "y" * 1001, category="source_too_large")
    refused(ws.read_source, "pipe.py")
    refused(ws.read_source, ".")
    refused(ws.read_source, "missing.py", category="file_not_found")


def test_output_path_is_confined(layout):
    work, problems, outside = layout
    ws = Workspace([work], denied=[problems])
    assert ws.output_path("artifact.py") == work / "artifact.py"
    assert ws.output_path("pkg/new/dir") == work / "pkg" / "new" / "dir"
    (work / "link_out").symlink_to(outside)
    (work / "existing_link.py").symlink_to(outside / "secret.txt")
    for trick in (
        "../outside/a.py",
        "link_out/a.py",
        "problems/op/metadata.json",
        "existing_link.py",
        "/tmp/x.py",
        "..",
        "new/../../outside/x",
        "link_out/new/deeper",
    ):
        refused(ws.output_path, trick)


def test_hard_link_to_a_hidden_file_is_refused(layout):
    """A hard link is the hidden file under a workspace name: the path check cannot see through it."""
    work, problems, outside = layout
    os.link(problems / "op" / "roofline.json", work / "linked.py")
    os.link(outside / "secret.txt", work / "linked_out.py")
    ws = Workspace([work], denied=[problems])
    for trick in ("linked.py", "linked_out.py"):
        text = refused(ws.read_source, trick, category="hard_link")
        assert "0.0123" not in text and "secret" not in text and "cp " in text
