"""profile_kernel on CPU: the honest CPU fallback through the real evaluator (with the roofline
in optimise mode), the GPU fallback built from an evaluator result (attribution kept), and the
whole Nsight Compute path (ncu wrapping the sandbox worker, NVTX-ranged forwards, parsing,
attribution, classification, time limit) with a stand-in ncu that checks its command line and
writes counters in ncu's CSV form."""

import json
import stat
import sys
import time

import pytest
import torch

from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate.models import KernelTime, ShapeResult
from atrex_mcp.policy import Policy
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.profiling.service import PROFILED_CALLS, capture_counters, counters_from_eval, profile_kernel
from atrex_mcp.runs.store import RunStore
from tests.runs_fixtures import KERNEL, OP, make_problem_root

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")


def _tiny_root(root):
    """rms_norm with one tiny scored shape (4 x 64) that has a roofline entry."""
    make_problem_root(root)
    folder = root / OP
    shapes = json.loads((folder / "shapes.json").read_text())
    shapes["shapes"].append({"id": "tiny", "init": {"eps": 1e-6}, "inputs": {"token_count": 4, "hidden_size": 64}})
    (folder / "shapes.json").write_text(json.dumps(shapes))
    roofline = json.loads((folder / "roofline.json").read_text())
    roofline["shapes"]["tiny"] = {
        "flops": {"bf16": 772},
        "bytes_read": 640,
        "bytes_written": 512,
        "arithmetic_intensity": 0.67,
        "t_sol_ms": {"h200": 2.4e-7},
        "bound": {"h200": "memory"},
    }
    (folder / "roofline.json").write_text(json.dumps(roofline))
    return Catalog([root])


@pytest.mark.slow
def test_cpu_profile_is_a_labelled_fallback_and_is_stored(tmp_path):
    store = RunStore(tmp_path / "state")
    report = profile_kernel(OP, KERNEL, "smoke", Catalog(), hardware="h200", store=store)
    assert report.tool == "torch.profiler" and report.fallback and "Triton interpreter" in report.note
    assert report.kernels == [] and report.wall_ms > 0 and report.bottleneck.kind == "unknown"
    assert report.device == "cpu (Triton interpreter)"  # the label validate uses, not the machine's architecture
    assert report.profile_id and store.get_profile(report.profile_id)["report"]["note"] == report.note


@pytest.mark.slow
def test_cpu_profile_carries_the_roofline_in_optimise_mode_only(tmp_path):
    catalog = _tiny_root(tmp_path / "problems")
    report = profile_kernel(OP, KERNEL, "tiny", catalog, hardware="h200")
    assert report.roofline["t_sol_ms"] == 2.4e-7 and report.roofline["bound"] == "memory"
    assert any(e.startswith("roofline: T_SOL") and "memory-bound" in e for e in report.bottleneck.evidence)
    hidden = profile_kernel(OP, KERNEL, "tiny", catalog, hardware="h200", policy=Policy("benchmark", catalog))
    assert hidden.roofline is None and not any("roofline" in e for e in hidden.bottleneck.evidence)


@pytest.mark.slow
def test_cpu_profile_of_a_scored_shape_checks_the_smoke_shape_and_answers_at_once(tmp_path, monkeypatch):
    import atrex_mcp.evaluate as evaluate_mod

    evaluated = []
    real = evaluate_mod.evaluate

    def spy(request, *args, **kwargs):
        evaluated.append(request.shapes)
        return real(request, *args, **kwargs)

    monkeypatch.setattr(evaluate_mod, "evaluate", spy)
    store = RunStore(tmp_path / "state")
    started = time.monotonic()
    # Shape 0 (2500 x 1024) took about a minute interpreted, to measure nothing.
    report = profile_kernel(OP, KERNEL, "0", Catalog(), hardware="h200", store=store)
    assert time.monotonic() - started < 60 and evaluated == [["smoke"]]
    assert report.shape == "0" and report.wall_ms is None and report.kernels == []
    assert report.bottleneck.kind == "unknown"
    assert "shape 0 was not run" in report.note and "smoke shape (smoke)" in report.note
    assert "hardware counters" in report.note and "DSL share" in report.note
    assert report.roofline["bound"] == "memory"
    assert any(e.startswith("roofline: T_SOL") for e in report.bottleneck.evidence)
    assert store.get_profile(report.profile_id)["shape"] == "0"
    wrong = KERNEL.replace("x * inv_rms * w", "x * inv_rms * w * 1.5")
    assert wrong != KERNEL
    with pytest.raises(AtrexError) as refused:  # a kernel that fails on the smoke shape is still refused
        profile_kernel(OP, wrong, "0", Catalog(), hardware="h200")
    assert refused.value.info.category == "profile_of_failing_kernel"
    assert "Shape smoke does not pass" in refused.value.info.message


def test_gpu_fallback_keeps_the_evaluators_attribution():
    shape = ShapeResult(
        id="0",
        correct=True,
        time_ms=0.0101,
        dsl_share=9.5 / 10.3,
        kernels=[
            KernelTime(name="_rms_norm_row", time_us=9.5, count=1, origin="candidate_dsl"),
            KernelTime(name="elementwise_kernel", time_us=0.8, count=2, origin="framework"),
        ],
    )
    report = counters_from_eval(
        OP,
        shape,
        "cuda",
        roofline={"t_sol_ms": 0.00213, "bound": "memory", "arithmetic_intensity": 0.75},
        note="Nsight Compute (ncu) is not installed on this server.",
    )
    assert (
        report.fallback
        and report.note.startswith("Nsight Compute (ncu) is not installed")
        and "not Nsight Compute" in report.note
    )
    assert [k.metrics["duration_ns"] for k in report.kernels] == [9500.0, 400.0]
    assert [k.origin for k in report.kernels] == ["candidate_dsl", "framework"]
    assert report.time_ms == 0.0101 and report.dsl_share == pytest.approx(0.922, abs=1e-3)
    assert any("of speed of light" in e for e in report.bottleneck.evidence)


# Stand-in for ncu as the sandbox worker's wrapper: refuses any command line other than the one
# the service must build (NVTX range filter, no kernel-name filter, kernel replay, unmodified
# clocks, the worker as the application, a launch limit), runs the worker (keeping the
# launcher's pipe fds, as a launcher that does not close inherited fds), then writes counters
# in ncu's long CSV form: the candidate's kernel and a framework copy, once per forward.
FAKE_NCU = """#!{python}
import subprocess, sys
args = sys.argv[1:]
def value(flag):
    return args[args.index(flag) + 1]
problems = []
for flag, want in (("--nvtx-include", "atrex_forward/"), ("--replay-mode", "kernel"), ("--clock-control", "none"),
                   ("--target-processes", "application-only"), ("--launch-count", "16"), ("--print-units", "base")):
    if flag not in args or value(flag) != want:
        problems.append(flag + " " + want)
if "--nvtx" not in args or "--csv" not in args or "--kernel-name" in args:
    problems.append("--nvtx --csv, no --kernel-name")
log = value("--log-file")
if problems:
    open(log, "w").write("==ERROR== stand-in ncu: wrong command line: " + "; ".join(problems) + "\\n")
    sys.exit(3)
metrics = value("--metrics").split(",")
target = args[args.index("--log-file") + 2:]  # ncu_command puts --log-file last; the worker's argv follows
code = subprocess.run(target, close_fds=False).returncode
values = {{"gpu__time_duration.sum": "12,000", "dram__throughput.avg.pct_of_peak_sustained_elapsed": "81.5",
          "sm__throughput.avg.pct_of_peak_sustained_elapsed": "22.0", "launch__registers_per_thread": "28"}}
head = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
rows = ["==PROF== Connected to process 3 (python3)", head]
launch = 0
for call in range({calls}):
    for kernel, scale in (("{kernel}", 1.0), ("elementwise_kernel", 0.1)):
        for m in metrics:
            v = values.get(m, "0")
            if m == "gpu__time_duration.sum":
                v = str(12000 * scale)
            rows.append('"%d","3","python3","h","%s","1","7","(128, 1, 1)","(37, 1, 1)","0","9.0",'
                        '"Command line profiler metrics","%s","","%s"' % (launch, kernel, m, v))
        launch += 1
open(log, "a").write("\\n".join(rows) + "\\n")
sys.exit(code)
"""


def _fake_ncu(tmp_path, calls=PROFILED_CALLS):
    fake = tmp_path / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable, calls=calls, kernel="_rms_norm_row"))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return str(fake)


@pytest.mark.slow
def test_ncu_wraps_the_worker_with_an_nvtx_filter(tmp_path):
    report = capture_counters(OP, KERNEL, "smoke", Catalog(), roofline=None, ncu=_fake_ncu(tmp_path))
    assert report.tool == "ncu" and not report.fallback
    main, copy = report.kernels
    assert (main.name, main.origin, main.launches) == (
        "_rms_norm_row",
        "candidate_dsl",
        1,
    )  # one launch per forward call
    assert (copy.name, copy.origin) == ("elementwise_kernel", "framework")
    assert main.metrics["dram_pct"] == 81.5 and report.bottleneck.kind == "memory"
    assert report.dsl_share == pytest.approx(1 / 1.1) and report.time_ms is None
    assert "NVTX range atrex_forward" in report.note and "limit" not in report.note


@pytest.mark.slow
def test_ncu_launch_limit_is_said(tmp_path):
    report = capture_counters(OP, KERNEL, "smoke", Catalog(), roofline=None, ncu=_fake_ncu(tmp_path, calls=8))
    assert "limit of 16 launches was reached" in report.note


@pytest.mark.slow
def test_ncu_on_a_failing_kernel_refuses(tmp_path):
    with pytest.raises(AtrexError, match="does not pass \\(numeric_mismatch\\)"):
        capture_counters(
            OP, KERNEL.replace("x * inv_rms * w", "x * w"), "smoke", Catalog(), roofline=None, ncu=_fake_ncu(tmp_path)
        )


def test_ncu_past_its_time_limit_stops_with_the_tail(tmp_path):
    """A capture that does not finish in time is stopped (the worker's process group is killed)
    and the error quotes what ncu printed."""
    slow = tmp_path / "ncu"
    slow.write_text(
        f"#!{sys.executable}\nimport sys, time\nargs = sys.argv[1:]\n"
        "open(args[args.index('--log-file') + 1], 'w').write('==PROF== Connected to process 3 (python3)\\n')\n"
        "time.sleep(60)\n"
    )
    slow.chmod(slow.stat().st_mode | stat.S_IEXEC)
    started = time.monotonic()
    with pytest.raises(AtrexError, match=r"did not finish within 3 s.*Connected to process 3") as caught:
        capture_counters(OP, KERNEL, "smoke", Catalog(), roofline=None, ncu=str(slow), timeout_s=3.0)
    assert caught.value.info.category == "profile_timeout" and time.monotonic() - started < 40


def test_ncu_is_not_used_where_workers_cannot_drop_to_an_unprivileged_uid():
    """ncu's opening makes the file system readable to the profiled worker; where the worker
    would keep uid 0 (no uid switch possible), profile_kernel falls back and says why."""
    from atrex_mcp.profiling.service import NCU_NEEDS_UNPRIVILEGED_WORKER, ncu_refusal

    assert ncu_refusal(gpu=True, ncu_found=True, worker_drops_uid=True) is None
    assert ncu_refusal(gpu=True, ncu_found=True, worker_drops_uid=False) == NCU_NEEDS_UNPRIVILEGED_WORKER
    assert "not installed" in ncu_refusal(gpu=True, ncu_found=False, worker_drops_uid=False)
    assert ncu_refusal(gpu=False, ncu_found=False, worker_drops_uid=False) == ""
