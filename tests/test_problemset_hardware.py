"""Hardware profiles and the T_SOL formula (SPEC §0.5) on hand-computed examples."""

import json
from pathlib import Path

import pytest

from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.hardware import (
    DEFAULT_PROFILE,
    DTYPE_PATHS,
    dtype_path,
    load_all_profiles,
    load_profile,
    profile_names,
)
from atrex_mcp.problemset.roofline import (
    Workload,
    arithmetic_intensity,
    bound,
    compute_seconds,
    memory_seconds,
    t_sol_ms,
)

ROOT = Path(__file__).resolve().parent.parent
SOURCED_FIELDS = ("hbm_bandwidth", "sm_count", "l2_bytes", "sm_clock_mhz", "memory_clock_mhz")


def test_the_five_profiles_load_and_h200_is_the_default():
    assert profile_names() == ["h100-sxm", "h20", "h200", "h200-measured", "xpu-a"]
    assert DEFAULT_PROFILE == "h200"
    for name, profile in load_all_profiles().items():
        assert profile.name == name and profile.description


def test_every_value_names_its_source():
    for profile in load_all_profiles().values():
        values = [profile.peaks[p] for p in DTYPE_PATHS] + [getattr(profile, f) for f in SOURCED_FIELDS]
        for v in values:
            assert len(v.source) > 10, (profile.name, v)
        assert profile.hbm_bandwidth.value > 0


def test_h200_datasheet_peaks_are_half_the_sparse_figures():
    h200 = load_profile("h200")
    assert h200.peak("bf16") == h200.peak("fp16") == 1979e12 / 2
    assert h200.peak("fp8_e4m3") == 3958e12 / 2
    assert h200.peak("tf32") == 989e12 / 2
    assert h200.peak("fp32") == 67e12
    assert h200.hbm_bandwidth.value == 4.8e12
    assert "sparsity" in h200.peaks["bf16"].source


def test_measured_profile_matches_the_measurement_files():
    """Peaks from shared/hardware/h200-measured.md; the memory ceiling is the best read:write mix
    of measurements/hbm_mix.py on the H200 (a 1:1 copy, 4.26 TB/s, was beaten by read-heavy kernels)."""
    m = load_profile("h200-measured")
    assert (m.peak("bf16"), m.peak("fp16"), m.peak("fp8_e4m3"), m.peak("tf32"), m.peak("fp32")) == (
        784e12,
        754e12,
        1345e12,
        393e12,
        50.1e12,
    )
    mixes = json.loads((ROOT / "measurements/results/hbm_mix/2026-12-01_h200.json").read_text())["best_by_mix"]
    assert m.hbm_bandwidth.value == pytest.approx(max(b["tb_per_s"] for b in mixes.values()) * 1e12, rel=1e-3)
    assert m.hbm_bandwidth.value > 1e12 * mixes["1:1"]["tb_per_s"] and not m.has_peak("int")


def test_unknown_profile_lists_the_valid_ones():
    with pytest.raises(AtrexError) as err:
        load_profile("h300")
    assert err.value.info.category == "unknown_hardware"
    assert "h200-measured" in err.value.info.hint


def test_spec_labels_select_peaks():
    assert dtype_path("int32") == "int" and dtype_path("fp8_e4m3") == "fp8_e4m3" and dtype_path("bf16") == "bf16"
    with pytest.raises(AtrexError):
        dtype_path("fp4")


@pytest.mark.parametrize(
    "profile, label, peak",
    [
        # SPEC §0.5 peaks table: bf16/fp16, fp8 e4m3, fp32 (and tf32 for H20).
        ("xpu-a", "bf16", 232.65e12),
        ("xpu-a", "fp16", 232.65e12),
        ("xpu-a", "fp8_e4m3", 465.3e12),
        ("xpu-a", "fp32", 29.1e12),
        ("h20", "bf16", 148e12),
        ("h20", "fp16", 148e12),
        ("h20", "fp8_e4m3", 296e12),
        ("h20", "fp32", 44e12),
        ("h20", "tf32", 74e12),
    ],
)
def test_spec_peaks_table(profile, label, peak):
    p = load_profile(profile)
    w = Workload(flops={dtype_path(label): int(peak / 1000)}, bytes_read=0, bytes_written=0)  # exactly 1 ms of compute
    assert t_sol_ms(w, p) == pytest.approx(1.0, rel=1e-12)
    assert bound(w, p) == "compute"


def test_spec_bandwidths():
    for name, bw in (("xpu-a", 5.3e12), ("h20", 4.0e12)):
        w = Workload(flops={"int": 0}, bytes_read=int(bw / 2000), bytes_written=int(bw / 2000))  # 1 ms of traffic
        assert t_sol_ms(w, load_profile(name)) == pytest.approx(1.0)
        assert bound(w, load_profile(name)) == "memory"


def test_t_sol_hand_example_memory_bound():
    # rms_norm shape 0 (T=2500, H=1024): W = 3*T*H + T = 7_682_500; Q = 2TH + 2H + 2TH = 10_242_048 B.
    w = Workload(flops={"bf16": 7_682_500}, bytes_read=5_122_048, bytes_written=5_120_000)
    h200 = load_profile("h200")
    assert memory_seconds(w, h200) == 10_242_048 / 4.8e12
    assert compute_seconds(w, h200) == 7_682_500 / 989.5e12
    assert t_sol_ms(w, h200) == 1000 * 10_242_048 / 4.8e12
    assert bound(w, h200) == "memory"
    assert arithmetic_intensity(w) == 7_682_500 / 10_242_048


def test_t_sol_sums_the_work_of_several_paths():
    # 1 ms of bf16 tensor-core work plus 2 ms of fp32 work on H200 outweigh 1 ms of traffic.
    w = Workload(flops={"bf16": int(989.5e9), "fp32": int(2 * 67e9)}, bytes_read=int(4.8e9), bytes_written=0)
    assert t_sol_ms(w, load_profile("h200")) == pytest.approx(3.0)
    assert bound(w, load_profile("h200")) == "compute"


def test_missing_peak_is_an_error_only_when_work_needs_it():
    xpu = load_profile("xpu-a")
    assert t_sol_ms(Workload(flops={"tf32": 0}, bytes_read=5300, bytes_written=0), xpu) == pytest.approx(1e-6)
    with pytest.raises(AtrexError) as err:
        t_sol_ms(Workload(flops={"tf32": 1}, bytes_read=0, bytes_written=0), xpu)
    assert err.value.info.category == "missing_peak"


def test_zero_traffic_has_no_intensity():
    assert arithmetic_intensity(Workload(flops={"int": 0}, bytes_read=0, bytes_written=0)) is None
