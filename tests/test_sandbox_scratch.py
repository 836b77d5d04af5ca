"""The trusted side's file operations on a worker's scratch directory never follow what the
candidate planted there: symbolic links (at any component), hard links, FIFOs, huge files."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from atrex_mcp.errors import AtrexError
from atrex_mcp.profiling import ncu
from atrex_mcp.profiling.sass import sass_facts_from_cache
from sandbox import scratch
from sandbox.launcher import SANDBOX_GID, SANDBOX_UID, hand_over

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")


@pytest.fixture
def planted(tmp_path):
    """A scratch directory holding links to a root-owned 0600 file outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.json"
    secret.write_text('{"t_sol_ms": 0.0123}')
    secret.chmod(0o600)
    work = tmp_path / "scratch"
    (work / "tmp").mkdir(parents=True)
    (work / "own.py").write_text("x = 1\n")
    (work / "x").symlink_to(secret)
    (work / "tmp" / "ncu.csv").symlink_to(secret)
    (work / "outdir").symlink_to(outside)
    os.link(secret, work / "hard.json")
    os.mkfifo(work / "fifo")
    return work, secret


@root_only
def test_chown_tree_changes_only_the_scratch_entries_themselves(planted):
    """A link planted for the root-side chown (before a uid-65534 worker starts) changes nothing outside."""
    work, secret = planted
    (work / "tmp" / "own.bin").write_bytes(b"x")
    (work / "tmp" / "x").symlink_to(secret)
    os.link(secret, work / "tmp" / "hard.json")
    (work / ".cache").symlink_to(secret.parent)
    before = os.stat(secret)
    hand_over(work)
    after = os.stat(secret)
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (before.st_uid, before.st_gid, 0o600)
    assert os.stat(work / "tmp" / "own.bin").st_uid == SANDBOX_UID and os.stat(work / "tmp").st_uid == SANDBOX_UID
    assert os.lstat(work / "tmp" / "x").st_uid == before.st_uid  # the link itself is left alone too
    assert os.stat(secret.parent).st_uid == before.st_uid  # .cache -> outside was not walked
    top = os.stat(work)  # the judge's files stay the judge's: the worker's group may only read them
    assert (top.st_uid, top.st_gid, stat.S_IMODE(top.st_mode)) == (0, SANDBOX_GID, 0o750)
    assert os.stat(work / "own.py").st_uid == 0


def test_reads_refuse_links_fifos_hard_links_and_oversized_files(planted):
    work, _secret = planted
    for relative in ("x", "tmp/ncu.csv", "outdir/secret.json", "hard.json", "fifo"):
        with pytest.raises(scratch.RefusedScratchFile):
            scratch.read_bytes(work, relative, 1 << 20)
    assert scratch.read_text(work, "own.py", 100) == "x = 1\n"
    with pytest.raises(scratch.RefusedScratchFile, match="more than"):
        scratch.read_bytes(work, "own.py", 3)
    assert scratch.read_bytes(work, "missing/nothing", 10) is None
    with pytest.raises(ValueError):
        scratch.read_bytes(work, "../outside/secret.json", 10)


def test_unlink_and_fresh_directory_remove_links_not_their_targets(planted):
    work, secret = planted
    (work / "tmp").rename(work / "real_tmp")
    (work / "tmp").symlink_to(secret.parent)  # a directory link: unlink through it must not reach outside
    scratch.unlink(work, "tmp/secret.json")
    assert secret.exists()
    scratch.fresh_directory(work, "tmp")
    assert (work / "tmp").is_dir() and not (work / "tmp").is_symlink() and secret.exists()


def test_ncu_log_planted_as_a_link_is_refused_and_not_quoted(planted):
    work, _secret = planted
    with pytest.raises(AtrexError) as err:
        ncu.read_log(work, "tmp/ncu.csv")
    assert err.value.info.category == "profiler_log_refused" and "0.0123" not in str(err.value)


def test_sass_reads_no_cubin_through_a_link(planted, tmp_path):
    work, secret = planted
    cache = work / ".cache" / "triton"
    cache.mkdir(parents=True)
    (cache / "k.cubin").symlink_to(secret)
    (cache / "dir").symlink_to(secret.parent)
    fake = tmp_path / "cuobjdump"
    fake.write_text(f"#!{sys.executable}\nimport sys\nprint(open(sys.argv[-1]).read())\n")
    fake.chmod(0o755)
    assert sass_facts_from_cache(cache, cuobjdump=str(fake)) == []
    seen = [name for name, _ in scratch.regular_files(work, ".cubin", 1 << 20)]
    assert seen == []
