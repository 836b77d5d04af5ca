"""Which directories the worker's mount namespace covers: only the outermost protected ones, since
a tmpfs over a folder removes every mount point below it (a wheel keeps the problem set inside the
package's own data folder, both protected)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sandbox.launcher import HIDE_SCRIPT, LaunchSpec, hidden_dirs, import_paths, isolation_plan, outermost


def tree(tmp_path: Path) -> dict[str, Path]:
    package = tmp_path / "site-packages" / "atrex_mcp"
    problems = package / "_embedded" / "problems"
    state = tmp_path / "state"
    for d in (problems, state, tmp_path / "other"):
        d.mkdir(parents=True)
    (tmp_path / "link-to-problems").symlink_to(problems)
    (tmp_path / "link-to-state").symlink_to(state)
    return {"package": package, "problems": problems, "state": state, "other": tmp_path / "other"}


def test_nested_roots_keep_only_the_outer_one(tmp_path):
    t = tree(tmp_path)
    assert outermost([t["problems"], t["package"]]) == [t["package"].resolve()]
    assert outermost([t["package"], t["problems"], t["state"]]) == sorted(
        [t["package"].resolve(), t["state"].resolve()]
    )


def test_duplicates_and_symlinks_are_one_root(tmp_path):
    t = tree(tmp_path)
    got = outermost(
        [
            t["state"],
            tmp_path / "link-to-state",
            t["state"] / ".." / "state",
            tmp_path / "link-to-problems",
            t["package"],
        ]
    )
    assert got == sorted([t["state"].resolve(), t["package"].resolve()])


def test_siblings_with_a_common_prefix_are_not_nested(tmp_path):
    a, ab = tmp_path / "prob", tmp_path / "problems"
    a.mkdir(), ab.mkdir()
    assert outermost([a, ab]) == sorted([a.resolve(), ab.resolve()])


def test_missing_roots_are_left_out(tmp_path):
    t = tree(tmp_path)
    assert outermost([tmp_path / "gone", t["other"]]) == [t["other"].resolve()]


def test_hidden_dirs_of_a_wheel_layout(tmp_path):
    t = tree(tmp_path)
    spec = LaunchSpec(scratch=tmp_path / "scratch", device="cpu", protected=[t["problems"], t["package"], t["state"]])
    hidden = hidden_dirs(spec)
    assert str(t["package"].resolve()) in hidden and str(t["state"].resolve()) in hidden
    assert str(t["problems"].resolve()) not in hidden
    assert all(not Path(a).is_relative_to(b) for a in hidden for b in hidden if a != b)


@pytest.mark.skipif(
    not isolation_plan(import_paths())["mount_namespace"], reason="covering folders needs root and a mount namespace"
)
def test_the_mount_script_covers_nested_roots(tmp_path):
    t = tree(tmp_path)
    (t["problems"] / "metadata.json").write_text("{}")
    spec = LaunchSpec(scratch=tmp_path / "scratch", device="cpu", protected=[t["problems"], t["package"]])
    prefix = isolation_plan(import_paths())["prefix"]
    probe = f"test ! -e {t['problems'] / 'metadata.json'} && test ! -e {t['problems']}"
    done = subprocess.run(
        [*prefix, "sh", "-c", HIDE_SCRIPT, "sh", *hidden_dirs(spec), "--", "sh", "-c", probe],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
