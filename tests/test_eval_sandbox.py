"""Sandbox pieces alone: the Landlock allow-list, the wire protocol, the leak guard and the
DSL attribution rules."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from atrex_mcp.evaluate.dsl import CANDIDATE_DSL, FRAMEWORK, GENERATED, LIBRARY, TritonAdapter, dsl_share
from atrex_mcp.evaluate.leakguard import MASK, LeakGuard
from atrex_mcp.problemset.catalog import Catalog
from eval_support import CANARY, EXAMPLES, ROOT, make_problem_root
from sandbox import landlock, protocol
from sandbox.launcher import LaunchSpec, import_paths, landlock_rules


def test_allow_list_never_reaches_a_protected_root(tmp_path):
    problems = make_problem_root(tmp_path / "problems")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    spec = LaunchSpec(scratch=scratch, device="cpu", protected=[problems, ROOT / "atrex_mcp"])
    rules = landlock_rules(spec, [*import_paths(), str(ROOT), str(tmp_path)])
    allowed = [Path(p) for p in rules]
    for secret in (problems / "rms_norm" / "roofline.json", ROOT / "atrex_mcp" / "catalog.py", ROOT / ".git"):
        assert not any(secret == a or a in secret.parents for a in allowed), secret
    assert rules[str(scratch.resolve())] == landlock.READ_WRITE
    assert rules[str((ROOT / "sandbox").resolve())] == landlock.READ_EXEC
    assert str(ROOT) not in rules  # the checkout itself stays closed: only its sandbox package is open


def test_profiler_openings_never_reach_a_protected_root(tmp_path):
    """ncu needs the whole file system readable (measured on the H200 by measurements/ncu_probe.py); the opening
    still leaves out every protected root and the checkout, and opens nothing for writing."""
    from atrex_mcp.profiling.ncu import NCU_OPENINGS

    problems = make_problem_root(tmp_path / "problems")
    state = tmp_path / "state"
    state.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    spec = LaunchSpec(
        scratch=scratch,
        device="cpu",
        protected=[problems, state, ROOT / "atrex_mcp"],
        **{k: v for k, v in NCU_OPENINGS.launch_fields().items()},
    )
    rules = landlock_rules(spec, [*import_paths(), str(ROOT), str(tmp_path)])
    allowed = [Path(p) for p in rules]
    for secret in (
        problems / "rms_norm" / "roofline.json",
        state / "runs.sqlite",
        ROOT / "atrex_mcp" / "catalog.py",
        ROOT / ".git" / "config",
    ):
        assert not any(secret == a or a in secret.parents for a in allowed), secret
    writable = [p for p, rights in rules.items() if rights & landlock.WRITE_FILE]
    assert all(p.startswith("/dev/") or p == str(scratch.resolve()) for p in writable), writable
    assert not NCU_OPENINGS.tcp_ports and not NCU_OPENINGS.abstract_unix


def test_worker_import_path_holds_the_package_root_even_when_only_the_cwd_had_it(monkeypatch):
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p and Path(p).resolve() != ROOT.resolve()] + [""])
    paths = import_paths()
    assert str(ROOT.resolve()) in paths and "" not in paths


def test_landlock_is_available_or_says_why():
    version = landlock.abi_version()
    assert version >= 0
    if version == 0:
        pytest.skip("this kernel has no Landlock; the evaluator records that as an isolation warning")


def test_protocol_round_trip_and_limits():
    r, w = os.pipe()
    try:
        protocol.send(w, {"nonce": "a", "value": [1, 2, 3]})
        assert protocol.receive(r, timeout_s=1) == {"nonce": "a", "value": [1, 2, 3]}
        os.write(w, (protocol.MAX_MESSAGE_BYTES + 1).to_bytes(4, "big"))
        with pytest.raises(protocol.ProtocolViolation):
            protocol.receive(r, timeout_s=1)
        with pytest.raises(protocol.ChannelTimeout):
            protocol.receive(r, timeout_s=0.1)
    finally:
        os.close(r), os.close(w)


def test_leak_guard_output_never_depends_on_hidden_values(tmp_path):
    """The text going out is the same whether it quoted hidden data or not; only the trusted-side
    flag tells them apart."""
    catalog = Catalog(make_problem_root(tmp_path / "problems"))
    guard = LeakGuard.for_problem(catalog, "rms_norm")
    assert guard.scrub(f"ValueError: {CANARY}") == (f"ValueError: {CANARY}", True)
    assert guard.scrub("ValueError: rms_norm failed at shape (4, 64)") == (
        "ValueError: rms_norm failed at shape (4, 64)",
        False,
    )


def test_leak_guard_finds_hidden_figures_in_any_rounding_unit_or_notation():
    guard = LeakGuard({0.0043521, 17.25391}, {"ATREX-HIDDEN-PROVENANCE-TEXT"})
    for quoted in (
        "t = 0.0043521.",
        "0.00435 ms",
        "4.352 us",
        "4352.1 ns",
        "4.35e-3",
        "4.3521E-03",
        "t_0.00435x",
        "1253400.0",
        "17.254",
        "0.0172539 s",
        "from ATREX-HIDDEN-PROVENANCE-TEXT/x",
    ):
        assert guard.leaks(quoted), quoted
    for honest in (
        "max abs error 0.5",
        "size 2147483648 overflows int32; 12582912 bytes",
        "line 435",
        "0.004",
        "x 3.6.0",
    ):
        assert not guard.leaks(honest), honest
    assert guard.scrub("t = 0.0043521 ms")[0] == guard.scrub("t = 0.0099999 ms")[0] == f"t = {MASK} ms"


def test_triton_adapter_reads_own_kernels_from_the_source():
    adapter = TritonAdapter()
    own = adapter.own_kernels((EXAMPLES / "rms_norm_triton.py").read_text())
    assert own == {"_rms_norm_rows"}
    assert adapter.own_kernels("def f(:") == set()
    assert adapter.origin("_rms_norm_rows", own) == CANDIDATE_DSL
    assert adapter.origin("_rms_norm_rows_0d1d2de", own) == CANDIDATE_DSL
    assert adapter.origin("triton_red_fused_mean_pow_0", own) == GENERATED
    assert adapter.origin("sm90_xmma_gemm_bf16bf16_bf16f32", own) == LIBRARY
    assert adapter.origin("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", own) == LIBRARY
    assert adapter.origin("void at::native::vectorized_elementwise_kernel<4>", own) == FRAMEWORK
    assert adapter.worker_env(cuda=False) == {"TRITON_INTERPRET": "1"} and adapter.worker_env(cuda=True) == {}


def test_dsl_share_is_time_weighted():
    assert dsl_share([("a", 3.0, CANDIDATE_DSL), ("b", 1.0, FRAMEWORK)]) == 0.75
    assert dsl_share([]) is None


_TCP_PROBE = """
import json, socket, sys
from sandbox import landlock
allowed, closed = int(sys.argv[1]), int(sys.argv[2])
report = landlock.restrict({}, tcp_ports=[allowed])
outcome = {"enforced": report.enforced, "handles": report.handles, "ports": report.tcp_ports}
for name, port in (("allowed", allowed), ("closed", closed)):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
        outcome[name] = "connected"
    except OSError as exc:
        outcome[name] = type(exc).__name__
    finally:
        s.close()
print(json.dumps(outcome))
"""


@pytest.mark.skipif(landlock.abi_version() < 4, reason="Landlock ABI < 4: this kernel cannot restrict TCP")
def test_landlock_keeps_only_the_profiler_ports_open_for_tcp():
    """A profiler's channel (ncu's ports) stays usable; any other TCP connect is refused."""
    import socket
    import subprocess
    import sys

    listeners = [socket.socket() for _ in range(2)]
    try:
        for s in listeners:
            s.bind(("127.0.0.1", 0))
            s.listen()
        allowed, closed = (s.getsockname()[1] for s in listeners)
        done = subprocess.run(
            [sys.executable, "-c", _TCP_PROBE, str(allowed), str(closed)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        for s in listeners:
            s.close()
    outcome = json.loads(done.stdout)
    assert outcome["enforced"] and "tcp" in outcome["handles"] and outcome["ports"] == [allowed]
    assert outcome["allowed"] == "connected"
    assert outcome["closed"] == "PermissionError"
