"""profile_kernel on CPU: the honest CPU fallback through the real evaluator, the GPU fallback
built from an evaluator result, and the whole Nsight Compute path (capture job, sandbox worker,
parsing, classification) with a stand-in ncu that runs the job and writes counters."""

import stat
import sys

import pytest
import torch

from atrex_mcp.catalog import Catalog
from atrex_mcp.evaluate.models import KernelTime, ShapeResult
from atrex_mcp.profiling.service import capture_counters, counters_from_eval, profile_kernel
from atrex_mcp.runs.store import RunStore
from tests.runs_fixtures import KERNEL, OP

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")


def test_cpu_profile_is_a_labelled_fallback_and_is_stored(tmp_path):
    store = RunStore(tmp_path / "state")
    report = profile_kernel(OP, KERNEL, "smoke", Catalog(), hardware="h200", store=store)
    assert report.tool == "torch.profiler" and report.fallback and "Triton interpreter" in report.note
    assert report.kernels == [] and report.wall_ms > 0 and report.bottleneck.kind == "unknown"
    assert report.profile_id and store.get_profile(report.profile_id)["report"]["note"] == report.note


def test_gpu_fallback_from_an_evaluator_result():
    shape = ShapeResult(id="0", correct=True, time_ms=0.0101, kernels=[
        KernelTime(name="_rms_norm_row", time_us=9.5, count=1, origin="candidate_dsl"),
        KernelTime(name="elementwise_kernel", time_us=0.8, count=2, origin="framework")])
    report = counters_from_eval(OP, shape, "cuda", roofline={"t_sol_ms": 0.00213, "bound": "memory", "arithmetic_intensity": 0.75},
                                note="Nsight Compute (ncu) is not installed on this server.")
    assert report.fallback and report.note.startswith("Nsight Compute (ncu) is not installed") and "not Nsight Compute" in report.note
    assert [k.metrics["duration_ns"] for k in report.kernels] == [9500.0, 400.0]
    assert any("of speed of light" in e for e in report.bottleneck.evidence)


FAKE_NCU = """#!{python}
# Stand-in for ncu: runs the wrapped command, then writes counters for the filtered kernel,
# as many launches as --launch-count allows, shaped like a memory-bound row kernel.
import re, subprocess, sys
args = sys.argv[1:]
metrics = args[args.index("--metrics") + 1].split(",")
log = args[args.index("--log-file") + 1]
kernel = re.match(r"regex:\\^\\((\\w+)", args[args.index("--kernel-name") + 1]).group(1)
target = args[args.index("--log-file") + 2:]  # ncu_command puts --log-file last, before the target
code = subprocess.run(target).returncode
values = {{"gpu__time_duration.sum": "12,000", "dram__throughput.avg.pct_of_peak_sustained_elapsed": "81.5",
          "sm__throughput.avg.pct_of_peak_sustained_elapsed": "22.0", "launch__registers_per_thread": "28"}}
head = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
rows = [head]
for launch in range(int(args[args.index("--launch-count") + 1])):  # one launch per forward call, as ncu limits them
    for m in metrics:
        rows.append('"%d","9","python3","h","%s","1","7","(128, 1, 1)","(37, 1, 1)","0","9.0","Command line profiler metrics","%s","","%s"'
                    % (launch, kernel, m, values.get(m, "0")))
open(log, "w").write("\\n".join(rows) + "\\n")
sys.exit(code)
"""


def test_ncu_path_end_to_end_with_a_stand_in_ncu(tmp_path):
    fake = tmp_path / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    report = capture_counters(OP, KERNEL, "smoke", Catalog(), roofline=None, ncu=str(fake))
    assert report.tool == "ncu" and not report.fallback
    (kernel,) = report.kernels
    assert kernel.name == "_rms_norm_row" and kernel.launches == 1  # one launch per profiled forward call
    assert kernel.metrics["dram_pct"] == 81.5 and report.bottleneck.kind == "memory"
    assert "only the candidate's own Triton kernels (_rms_norm_row)" in report.note


def test_ncu_path_reports_a_failing_kernel(tmp_path):
    fake = tmp_path / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    from atrex_mcp.errors import AtrexError
    with pytest.raises(AtrexError, match="did not complete: numeric_mismatch"):
        capture_counters(OP, KERNEL.replace("x * inv_rms * w", "x * w"), "smoke", Catalog(), roofline=None, ncu=str(fake))
