"""Where worker memory cgroups go in a cgroup v2 tree: below the server's own cgroup when v2 lets it
give its children the memory controller, else below a cgroup of the server's own made beside it under
the nearest ancestor that gives its children memory, else nowhere, with the reason. The decision reads
the tree only, so it is checked here against a fake cgroup2 tree (this machine's cgroup2 mount has no
controllers). Server cgroups of servers no longer running are swept, with what is left in them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox import memory_cgroup, process_tree
from sandbox.memory_cgroup import Hierarchy, V2Placement, place_v2, server_cgroup_name

PID = os.getpid()
OTHER = 4242  # the shell that started the server, sharing its cgroup
V1_MEMORY = Path("/sys/fs/cgroup/memory")


def _cgroup(path: Path, controllers: str = "", subtree: str = "", procs: tuple[int, ...] = (), root: bool = False):
    """One directory of the fake tree, with the files place_v2 reads (cgroup.type: not the root)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "cgroup.controllers").write_text(f"{controllers}\n")
    (path / "cgroup.subtree_control").write_text(f"{subtree}\n")
    (path / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in procs))
    if not root:
        (path / "cgroup.type").write_text("domain\n")
    return path


def _tree(
    tmp_path: Path,
    *,
    api_subtree: str = "cpu memory pids",
    own_controllers: str = "memory pids",
    own_subtree: str = "",
    own_procs: tuple[int, ...] = (PID, OTHER),
    root_subtree: str = "cpu memory pids",
):
    """The GPU machine's shape: /process_api/<id> holds the server and the shell that started it."""
    mount = _cgroup(tmp_path / "cgroup", "cpu io memory pids", root_subtree, (1,), root=True)
    api = _cgroup(mount / "process_api", "cpu memory pids", api_subtree)
    own = _cgroup(api / "7fec584b367a3469b77df542f7606c62", own_controllers, own_subtree, own_procs)
    return mount, api, own


def test_an_own_cgroup_giving_its_children_memory_holds_the_worker_cgroups(tmp_path):
    mount, _api, own = _tree(tmp_path, own_subtree="memory")
    assert place_v2(mount, own, PID) == V2Placement(own)


def test_a_server_alone_in_its_cgroup_moves_into_a_leaf_and_enables_memory_there(tmp_path):
    mount, _api, own = _tree(tmp_path, own_procs=(PID,))
    assert place_v2(mount, own, PID) == V2Placement(own, enable=True, leaf=True)


def test_a_shared_cgroup_sends_the_worker_cgroups_to_a_server_cgroup_beside_it(tmp_path):
    mount, api, own = _tree(tmp_path)
    place = place_v2(mount, own, PID)
    assert isinstance(place, V2Placement), place
    assert (place.base, place.ancestor, place.enable, place.leaf) == (api / server_cgroup_name(PID), api, True, False)
    assert place.base.name == f"atrex-server-{PID}-{process_tree.start_ticks(PID)}"
    assert f"{own} holds other processes than this server" in place.note
    assert f"made under {api}" in place.note and "a sibling of the server's cgroup" in place.note


def test_an_undelegated_cgroup_goes_up_to_the_nearest_ancestor_giving_memory(tmp_path):
    mount, _api, own = _tree(tmp_path, api_subtree="pids", own_controllers="pids")
    place = place_v2(mount, own, PID)
    assert isinstance(place, V2Placement), place
    assert (place.base, place.ancestor) == (mount / server_cgroup_name(PID), mount)
    assert f"the memory controller is not delegated to {own}" in place.note
    assert "sibling" not in place.note


def test_no_ancestor_giving_memory_means_no_cap_and_says_why(tmp_path):
    mount, _api, own = _tree(tmp_path, api_subtree="pids", own_controllers="pids", root_subtree="cpu pids")
    reason = place_v2(mount, own, PID)
    assert reason == (
        f"cgroup v2: the memory controller is not delegated to {own}, and no cgroup above it up to {mount} gives "
        "its children the memory controller (run the server in a cgroup of its own with memory delegated, e.g. "
        "systemd Delegate=yes)"
    )


def test_a_server_at_the_top_of_its_cgroup_namespace_looks_no_higher(tmp_path):
    """The mount's top (a container's cgroup namespace root) shared with others: nothing above is read."""
    top = _cgroup(tmp_path / "cgroup", "memory pids", "", (PID, OTHER))
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")  # outside the mount: never a candidate
    reason = place_v2(top, top, PID)
    assert isinstance(reason, str) and reason.startswith(f"cgroup v2: {top} holds other processes than this server")
    assert f"no cgroup above it up to {top}" in reason


def test_a_server_cgroup_that_cannot_be_set_up_is_removed_and_named(tmp_path):
    """A plain directory has no cgroup.subtree_control once made: the step fails, nothing is left."""
    mount, api, own = _tree(tmp_path)
    place = place_v2(mount, own, PID)
    assert isinstance(place, V2Placement)
    reason = memory_cgroup.apply_v2(place)
    assert reason == (
        f"cgroup v2: {own} holds other processes than this server, so its children cannot get the memory "
        f"controller, and memory cannot be enabled for the children of {place.base}, a cgroup of this server's "
        f"own under {api}: No such file or directory"
    )
    assert not place.base.exists()


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def test_server_cgroups_of_servers_no_longer_running_are_swept(tmp_path):
    _mount, api, _own = _tree(tmp_path)
    ours = api / server_cgroup_name(PID)
    ours.mkdir()
    live_worker = ours / f"atrex-worker-{PID}-{process_tree.start_ticks(PID)}-0"
    live_worker.mkdir()
    dead = _dead_pid()
    stale = api / f"atrex-server-{dead}-7"
    (stale / f"atrex-worker-{dead}-7-3").mkdir(parents=True)
    reused = api / "atrex-server-1-0"  # pid 1 runs, but started at another time
    reused.mkdir()
    alive = api / server_cgroup_name(1)
    alive.mkdir()
    removed = memory_cgroup.sweep_stale(Hierarchy(2, ours))
    assert sorted(removed) == sorted([f"atrex-server-{dead}-7/atrex-worker-{dead}-7-3", stale.name, reused.name])
    assert not stale.exists() and not reused.exists()
    assert alive.is_dir() and live_worker.is_dir()


def test_server_cgroups_are_not_swept_from_below_the_servers_own_cgroup(tmp_path):
    """Placed below its own cgroup, a server sweeps only worker cgroups there, never its parent."""
    _mount, api, own = _tree(tmp_path, own_subtree="memory")
    stale = api / f"atrex-server-{_dead_pid()}-7"
    stale.mkdir()
    assert memory_cgroup.sweep_stale(Hierarchy(2, own)) == []
    assert stale.is_dir()


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(V1_MEMORY / "memory.limit_in_bytes", os.W_OK),
    reason="needs a writable cgroup memory hierarchy",
)
def test_a_dead_servers_cgroup_is_emptied_and_removed_in_a_real_tree():
    """In the kernel's tree: a stale server cgroup with a worker cgroup holding a live process."""
    found = memory_cgroup.hierarchy()
    assert isinstance(found, Hierarchy), found
    ours = Hierarchy(found.version, found.base / server_cgroup_name(PID))
    ours.base.mkdir()
    dead = _dead_pid()
    stale = Hierarchy(found.version, found.base / f"atrex-server-{dead}-1")
    stale.base.mkdir()
    try:
        group = memory_cgroup.MemoryCgroup.create(stale, 64 << 20)
        left = subprocess.Popen([*group.join_prefix(), "sleep", "60"], pass_fds=(group.procs_fd,))
        deadline = time.monotonic() + 10
        while left.pid not in group.pids() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert left.pid in group.pids()
        group.close_join()
        os.close(group._dir_fd)
        group._dir_fd = -1
        assert memory_cgroup.sweep_stale(ours) == [f"{stale.base.name}/{group.name}", stale.base.name]
        assert left.wait(timeout=10) == -9
        assert not stale.base.exists() and ours.base.is_dir()
    finally:
        for leftover in (stale.base, ours.base):
            if leftover.exists():
                memory_cgroup.remove_server_cgroup(leftover.parent, leftover.name)
    assert not ours.base.exists()
