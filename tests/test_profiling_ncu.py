"""Nsight Compute parsing and capture, on CPU: a hand-made CSV fixture in ncu's real layout
(see tests/fixtures/ncu/README.md) and a stand-in `ncu` executable for the capture loop."""

import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest

from atrex_mcp.errors import AtrexError
from atrex_mcp.profiling.classify import classify
from atrex_mcp.profiling.metrics import HOPPER_METRICS
from atrex_mcp.profiling.models import KernelCounters, SassFacts
from atrex_mcp.profiling.ncu import capture, ncu_command, parse_ncu_csv, replay_passes

FIXTURE = Path(__file__).parent / "fixtures" / "ncu" / "rms_norm_h200_handmade.csv"


def test_parse_long_form_csv_fixture():
    parsed = parse_ncu_csv(FIXTURE.read_text())
    assert len(parsed.kernels) == 1
    k = parsed.kernels[0]
    assert (k.name, k.launches, k.block, k.grid) == ("_rms_kernel", 2, "(128, 1, 1)", "(2500, 1, 1)")
    assert k.metrics["duration_ns"] == pytest.approx((9872 + 10112) / 2)  # median of two launches
    assert k.metrics["dram_pct"] == pytest.approx((78.46 + 76.90) / 2)
    assert k.metrics["dram_read_bytes"] == 5_122_048 and k.metrics["grid_size"] == 2500
    assert k.metrics["stall_long_scoreboard"] == pytest.approx(54.6)
    assert "spill_instructions" not in k.metrics
    assert parsed.unavailable == ["sass__inst_executed_register_spilling"]


def test_parse_wide_form_and_scaled_units():
    text = textwrap.dedent("""\
        ==PROF== Disconnected from process 1
        "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__time_duration.sum","dram__bytes_read.sum"
        "","","","","","","","","","","","usecond","Mbyte"
        "0","1","python3","h","k1","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0","2.50","1.5"
        "1","1","python3","h","k2","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0","1,200.00","3"
        """)  # noqa: E501 - ncu's CSV header is one line
    kernels = {k.name: k for k in parse_ncu_csv(text).kernels}
    assert kernels["k1"].metrics["duration_ns"] == pytest.approx(2500.0)
    assert kernels["k2"].metrics["duration_ns"] == pytest.approx(1.2e6)
    assert kernels["k1"].metrics["dram_read_bytes"] == pytest.approx(1.5e6)
    assert list(kernels) == ["k2", "k1"]  # longest first


def test_parse_output_without_a_table():
    assert parse_ncu_csv("==PROF== No kernels were profiled.\n").kernels == []


def test_command_wraps_the_target_with_clock_control_none(tmp_path):
    cmd = ncu_command(
        ["python3", "worker.py"],
        ["gpu__time_duration.sum", "dram__bytes_read.sum"],
        tmp_path / "o.csv",
        ncu="/opt/ncu",
        nvtx_range="atrex_profile",
    )
    assert cmd[:3] == ["/opt/ncu", "--clock-control", "none"]
    assert "--csv" in cmd and cmd[cmd.index("--print-units") + 1] == "base"
    assert cmd[cmd.index("--metrics") + 1] == "gpu__time_duration.sum,dram__bytes_read.sum"
    assert cmd[cmd.index("--nvtx-include") + 1] == "atrex_profile/"
    assert cmd[-2:] == ["python3", "worker.py"]


FAKE_NCU = """#!{python}
# Stand-in for ncu: refuses one metric like an ncu that does not know it, otherwise runs the
# target and writes a CSV for the requested metrics to --log-file.
import subprocess, sys
args = sys.argv[1:]
metrics = args[args.index("--metrics") + 1].split(",")
log = args[args.index("--log-file") + 1]
if "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active" in metrics:
    print("==ERROR== Failed to find metric "
          "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active", file=sys.stderr)
    sys.exit(1)
target = args[args.index("--log-file") + 2:]
subprocess.run(target, check=True)
head = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
row = ('"0","9","python3","h","k","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0",'
       '"Command line profiler metrics","%s","","1"')
rows = [head] + [row % m for m in metrics]
open(log, "w").write("\\n".join(rows) + "\\n")
"""


def test_capture_drops_metrics_this_ncu_does_not_know(tmp_path):
    fake = tmp_path / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    marker = tmp_path / "ran"
    result = capture([sys.executable, "-c", f"open({str(marker)!r}, 'w').write('x')"], workdir=tmp_path, ncu=str(fake))
    assert marker.exists()  # the wrapped program ran
    assert result.unavailable == ["sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"]
    assert len(result.kernels[0].metrics) == len(HOPPER_METRICS) - 1


def test_capture_without_ncu_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr("atrex_mcp.profiling.ncu.ncu_executable", lambda: None)
    with pytest.raises(AtrexError, match="not installed"):
        capture(["true"], workdir=tmp_path)


def _kernel(name="k", **metrics):
    return KernelCounters(name=name, launches=1, metrics=metrics)


def test_classify_fixture_as_memory_bound_with_evidence():
    # the fixture holds two forward calls: one launch per forward, as profiling.service normalises it
    kernels = [k.model_copy(update={"launches": 1}) for k in parse_ncu_csv(FIXTURE.read_text()).kernels]
    roofline = {"t_sol_ms": 0.00427, "bound": "memory", "arithmetic_intensity": 0.75}
    sass = [
        SassFacts(
            kernel="_rms_kernel",
            instructions=90,
            hgmma=0,
            hmma=0,
            global_loads={"16": 8},
            global_stores={"16": 8},
            local_loads=0,
            local_stores=0,
            tma=0,
            cp_async=0,
            facts=["global loads: 8×16-bit (no 128-bit vectorised loads)"],
        )
    ]
    b = classify(kernels, roofline=roofline, sass=sass)
    assert b.kind == "memory"
    text = "\n".join(b.evidence)
    assert "DRAM throughput 78% of peak" in text
    assert "43% of speed of light" in text and "memory-bound" in text
    assert "top warp stalls: long_scoreboard 55%, lg_throttle 15%, wait 6%" in text
    assert "32 registers/thread, no local-memory traffic" in text
    assert "SASS: global loads: 8×16-bit (no 128-bit vectorised loads)" in text


def test_classify_compute_latency_launch_and_unknown():
    assert classify([_kernel(duration_ns=2e6, dram_pct=20, sm_pct=85, tensor_gmma_pct=70)]).kind == "compute"
    latency = classify([_kernel(duration_ns=2e6, dram_pct=25, l2_pct=30, sm_pct=20, stall_long_scoreboard=70)])
    assert latency.kind == "latency" and "long_scoreboard 70%" in "\n".join(latency.evidence)
    launch = classify(
        [_kernel("a", duration_ns=2500, dram_pct=5, sm_pct=3), _kernel("b", duration_ns=1800, dram_pct=4, sm_pct=2)]
    )
    assert launch.kind == "launch" and "2 kernel launch(es)" in launch.evidence[0]
    assert classify([_kernel(duration_ns=2e6)]).kind == "unknown"


def test_classify_without_counters_uses_the_roofline_only_near_speed_of_light():
    """The torch.profiler fallback has durations only: the H200 rms_norm kernel at 9.54 µs against a
    memory-bound T_SOL of 8.53 µs is memory-bound; at 18.7 µs (46 %) the time could be anything."""
    roofline = {"t_sol_ms": 0.00853, "bound": "memory", "arithmetic_intensity": 0.75}
    near = classify([_kernel(duration_ns=9540)], roofline=roofline)
    assert near.kind == "memory" and any("89% of speed of light" in e and "HBM bandwidth" in e for e in near.evidence)
    assert classify([_kernel(duration_ns=18720)], roofline=roofline).kind == "unknown"
    gemm = {"t_sol_ms": 0.5, "bound": "compute"}
    assert classify([_kernel(duration_ns=6e5)], roofline=gemm).kind == "compute"
    assert classify([_kernel(duration_ns=9540)]).kind == "unknown"  # benchmark mode: no roofline, no class from it
    assert classify([]).kind == "unknown"


def test_standalone_tool_parses_a_csv(capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "ncu_capture_tool", Path(__file__).parent.parent / "tools" / "ncu_capture.py"
    )
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(["--parse", str(FIXTURE), "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert data["bottleneck"]["kind"] == "memory" and data["kernels"][0]["name"] == "_rms_kernel"
    assert tool.main(["--parse", str(FIXTURE)]) == 0
    assert "bottleneck: memory" in capsys.readouterr().out


def test_command_limits_the_capture_to_few_kernel_replays(tmp_path):
    cmd = ncu_command(
        ["python3", "job.py"], ["gpu__time_duration.sum"], tmp_path / "o.csv", kernel_regex="^(k)$", launch_count=2
    )
    assert cmd[cmd.index("--replay-mode") + 1] == "kernel"
    assert cmd[cmd.index("--launch-count") + 1] == "2"
    assert cmd[cmd.index("--kernel-name") + 1] == "regex:^(k)$"
    assert cmd[cmd.index("--kernel-name-base") + 1] == "function"  # the bare function name, as Triton names its kernels
    assert cmd[cmd.index("--target-processes") + 1] == "all"
    assert cmd[-4:] == ["--log-file", str(tmp_path / "o.csv"), "python3", "job.py"]


def test_wrapper_prefix_for_the_sandbox_worker(tmp_path):
    """With no target, the command is the argv prefix placed before the worker's interpreter:
    the worker is ncu's application process, filtered by the NVTX push/pop range."""
    cmd = ncu_command(
        [],
        ["gpu__time_duration.sum"],
        tmp_path / "o.csv",
        ncu="/opt/ncu",
        nvtx_range="atrex_forward",
        launch_count=16,
        child_processes=False,
    )
    assert cmd[-2:] == ["--log-file", str(tmp_path / "o.csv")]
    assert cmd[cmd.index("--target-processes") + 1] == "application-only"
    assert cmd[cmd.index("--nvtx") + 1 : cmd.index("--nvtx") + 3] == ["--nvtx-include", "atrex_forward/"]
    assert "--kernel-name" not in cmd


def test_replay_passes_are_read_from_ncu_progress_lines():
    output = (
        "==PROF== Connected to process 12 (/usr/bin/python3)\n"
        '==PROF== Profiling "_rms_norm_kernel" - 0: 0%....50%....100% - 9 passes\n'
        '==PROF== Profiling "_rms_norm_kernel" - 1: 0%....50%....100% - 9 passes\n'
    )
    assert replay_passes(output) == [9, 9]


def test_a_capture_past_its_limit_is_stopped_and_quotes_what_ncu_printed(tmp_path):
    fake = tmp_path / "ncu"
    fake.write_text(
        f"#!{sys.executable}\nimport sys, time\nprint('==PROF== Connected to process 7', flush=True)\n"
        "print('==WARNING== waiting for the target', file=sys.stderr, flush=True)\ntime.sleep(60)\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    started = time.monotonic()
    with pytest.raises(AtrexError) as info:
        capture(["true"], workdir=tmp_path, ncu=str(fake), timeout_s=1.0)
    assert time.monotonic() - started < 15
    assert info.value.info.category == "profile_timeout"
    assert "0 launches profiled" in info.value.info.message and "waiting for the target" in info.value.info.message
