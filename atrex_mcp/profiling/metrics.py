"""The Nsight Compute metric set collected on Hopper, each with a short key and what it tells.

Names are ncu's (2023+ naming; the H200 run recorded in ../shared/hardware confirms the first
three). A metric a given ncu or GPU does not know is dropped at capture time and listed as
unavailable in the profile, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

# The stall reasons that explain nearly all latency-bound kernels (memory waits, queue
# throttles, fixed-latency dependencies, barriers). Each extra reason costs replay passes, so
# the rarer ones (membar, drain, IMC miss, branch resolving, sleeping, ...) are left out.
STALL_REASONS = (
    "long_scoreboard",
    "short_scoreboard",
    "mio_throttle",
    "lg_throttle",
    "math_pipe_throttle",
    "wait",
    "barrier",
)


@dataclass(frozen=True)
class Metric:
    key: str
    name: str
    meaning: str


def _stall(reason: str) -> Metric:
    return Metric(
        f"stall_{reason}",
        f"smsp__warp_issue_stalled_{reason}_per_warp_active.pct",
        f"% of active warps per cycle stalled on {reason.replace('_', ' ')}",
    )


HOPPER_METRICS: tuple[Metric, ...] = (
    Metric("duration_ns", "gpu__time_duration.sum", "kernel duration (ns)"),
    Metric("dram_pct", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM (HBM) throughput, % of peak"),
    Metric("dram_read_bytes", "dram__bytes_read.sum", "bytes read from DRAM"),
    Metric("dram_write_bytes", "dram__bytes_write.sum", "bytes written to DRAM"),
    Metric("l2_pct", "lts__throughput.avg.pct_of_peak_sustained_elapsed", "L2 throughput, % of peak"),
    Metric("l2_hit_pct", "lts__t_sector_hit_rate.pct", "L2 sector hit rate, %"),
    Metric("l1_pct", "l1tex__throughput.avg.pct_of_peak_sustained_active", "L1/TEX throughput, % of peak"),
    Metric("sm_pct", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "SM (compute) throughput, % of peak"),
    Metric(
        "sm_active_pct",
        "sm__cycles_active.avg.pct_of_peak_sustained_elapsed",
        "cycles with at least one warp on an SM, %",
    ),
    Metric(
        "issue_active_pct", "smsp__issue_active.avg.pct_of_peak_sustained_active", "cycles an instruction was issued, %"
    ),
    Metric(
        "tensor_hmma_pct",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "tensor pipe (mma.sync) active, %",
    ),
    Metric(
        "tensor_gmma_pct",
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
        "tensor pipe (Hopper wgmma) active, %",
    ),
    Metric("fma_pipe_pct", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", "FMA pipe active, %"),
    Metric("achieved_occupancy_pct", "sm__warps_active.avg.pct_of_peak_sustained_active", "achieved occupancy, %"),
    Metric("theoretical_occupancy_pct", "sm__maximum_warps_per_active_cycle_pct", "theoretical occupancy, %"),
    Metric("registers_per_thread", "launch__registers_per_thread", "registers per thread"),
    Metric("block_size", "launch__block_size", "threads per block"),
    Metric("grid_size", "launch__grid_size", "blocks in the grid"),
    Metric("waves_per_sm", "launch__waves_per_multiprocessor", "waves of blocks per SM"),
    Metric("shared_static_bytes", "launch__shared_mem_per_block_static", "static shared memory per block (bytes)"),
    Metric("shared_dynamic_bytes", "launch__shared_mem_per_block_dynamic", "dynamic shared memory per block (bytes)"),
    Metric("spill_instructions", "sass__inst_executed_register_spilling", "executed register-spill instructions"),
    Metric(
        "local_load_bytes",
        "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
        "local-memory load bytes (spills, local arrays)",
    ),
    Metric("local_store_bytes", "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum", "local-memory store bytes"),
    *(_stall(r) for r in STALL_REASONS),
)

BY_NAME = {m.name: m for m in HOPPER_METRICS}
BY_KEY = {m.key: m for m in HOPPER_METRICS}
