"""Bottleneck classification: memory-, compute-, latency- or launch-bound, with the evidence.

Rules (in order), on the kernels of one forward call (each kernel's duration is a median per
launch, `launches` its launches per forward):
* launch: every kernel is shorter than LAUNCH_FLOOR_NS and none saturates a unit — launch
  overhead and ramp-up/tail dominate, so fewer or fused launches are the lever;
* memory: the busiest memory unit (DRAM or L2) reaches SATURATED % of peak and is at least as
  busy as the SMs;
* compute: the SMs or a tensor pipe reach SATURATED % of peak;
* latency: nothing is saturated — warps wait (the stall breakdown says on what) and the
  kernel lacks the parallelism or overlap to hide it;
* without counters (the torch.profiler fallback): the roofline's bound when the forward runs
  within SATURATED % of T_SOL, else unknown.
In optimise mode the roofline adds where the kernel stands against T_SOL and the bound the
roofline predicts. Thresholds are documented in docs/runs.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from atrex_mcp.profiling.metrics import STALL_REASONS
from atrex_mcp.profiling.models import Bottleneck, BottleneckKind, KernelCounters, SassFacts

SATURATED = 60.0
LAUNCH_FLOOR_NS = 5_000.0


def _get(k: KernelCounters, key: str) -> float | None:
    return k.metrics.get(key)


def _max(k: KernelCounters, keys: tuple[str, ...]) -> tuple[float | None, str]:
    present = [(k.metrics[key], key) for key in keys if key in k.metrics]
    return max(present) if present else (None, "")


_LABEL = {
    "dram_pct": "DRAM",
    "l2_pct": "L2",
    "sm_pct": "SM",
    "tensor_gmma_pct": "tensor pipe (wgmma)",
    "tensor_hmma_pct": "tensor pipe (mma.sync)",
}


def _stalls(k: KernelCounters, top: int = 3) -> str | None:
    stalls = sorted(
        ((k.metrics[f"stall_{r}"], r) for r in STALL_REASONS if f"stall_{r}" in k.metrics and r != "selected"),
        reverse=True,
    )
    shown = [f"{r} {v:.0f}%" for v, r in stalls[:top] if v > 0]
    return "top warp stalls: " + ", ".join(shown) if shown else None


def _resources(k: KernelCounters) -> list[str]:
    out = []
    achieved, theoretical = _get(k, "achieved_occupancy_pct"), _get(k, "theoretical_occupancy_pct")
    if achieved is not None:
        out.append(
            f"achieved occupancy {achieved:.0f}%"
            + (f" (theoretical {theoretical:.0f}%)" if theoretical is not None else "")
        )
    regs = _get(k, "registers_per_thread")
    if regs is not None:
        local = (_get(k, "local_load_bytes") or 0.0) + (_get(k, "local_store_bytes") or 0.0)
        spills = _get(k, "spill_instructions")
        spill_text = f", {local:.0f} B local-memory traffic" if local else ", no local-memory traffic"
        if spills:
            spill_text += f", {spills:.0f} spill instructions"
        out.append(f"{regs:.0f} registers/thread{spill_text}")
    waves, grid = _get(k, "waves_per_sm"), _get(k, "grid_size")
    if waves is not None and grid is not None:
        out.append(f"grid {grid:.0f} blocks = {waves:.2f} waves per SM")
    hit = _get(k, "l2_hit_pct")
    if hit is not None:
        out.append(f"L2 hit rate {hit:.0f}%")
    return out


def roofline_evidence(roofline: dict, measured_ns: float | None) -> str:
    """Where the kernel stands against T_SOL (when a device time was measured) and the bound
    the roofline predicts."""
    t_sol_us = roofline["t_sol_ms"] * 1e3
    against = (
        f"T_SOL {t_sol_us:.2f} µs vs {measured_ns / 1e3:.2f} µs measured = {t_sol_us * 1e3 / measured_ns:.0%} of "
        "speed of light"
        if measured_ns
        else f"T_SOL {t_sol_us:.2f} µs (nothing measured on a device to compare)"
    )
    intensity = roofline.get("arithmetic_intensity")
    return f"roofline: {against}; the roofline predicts {roofline.get('bound', '?')}-bound" + (
        f" (intensity {intensity:.2f} FLOP/B)" if intensity is not None else ""
    )


def _without_counters(roofline: dict | None, measured_ns: float) -> tuple[BottleneckKind, str]:
    """The class when no throughput counter was read. A forward within SATURATED % of T_SOL moves
    the roofline's minimum bytes (or FLOPs) at that share of peak or more, so the roofline's bound
    is the measured one; further from T_SOL the time may go to latency or to extra traffic, and
    without counters that cannot be told apart."""
    if roofline and roofline.get("t_sol_ms") and measured_ns and roofline.get("bound") in ("memory", "compute"):
        at_sol = roofline["t_sol_ms"] * 1e6 / measured_ns
        if at_sol >= SATURATED / 100:
            unit = "HBM bandwidth" if roofline["bound"] == "memory" else "peak FLOP rate"
            return roofline["bound"], (
                f"no hardware throughput counters, but the forward runs at {at_sol:.0%} of speed "
                f"of light: it already uses at least {SATURATED:.0f}% of the {unit} the roofline "
                "is bound by"
            )
    return "unknown", "no hardware throughput counters: the bottleneck cannot be measured here"


def classify(
    kernels: list[KernelCounters], *, roofline: dict | None = None, sass: Sequence[SassFacts] = ()
) -> Bottleneck:
    """Classify one forward call from its kernels' counters (and the roofline, when revealed)."""
    if not kernels:
        return Bottleneck(
            kind="unknown", evidence=["no GPU kernel was profiled: forward launched none in the profiled range"]
        )

    def device_ns(k: KernelCounters) -> float:
        return k.metrics.get("duration_ns", 0.0) * k.launches

    total_ns = sum(device_ns(k) for k in kernels)
    main = max(kernels, key=device_ns)
    share = device_ns(main) / total_ns if total_ns else 1.0
    evidence = [
        f"{sum(k.launches for k in kernels)} kernel launch(es), {total_ns / 1e3:.2f} µs device time; "
        f"main kernel {main.name} ({share:.0%})"
    ]
    mem, mem_key = _max(main, ("dram_pct", "l2_pct"))
    comp, comp_key = _max(main, ("sm_pct", "tensor_gmma_pct", "tensor_hmma_pct"))
    if mem is not None:
        evidence.append(
            f"{_LABEL[mem_key]} throughput {mem:.0f}% of peak (DRAM {main.metrics.get('dram_pct', 0):.0f}%, L2 "
            f"{main.metrics.get('l2_pct', 0):.0f}%)"
        )
    if comp is not None:
        evidence.append(f"{_LABEL[comp_key]} throughput {comp:.0f}% of peak")

    if roofline and roofline.get("t_sol_ms") and total_ns:
        evidence.append(roofline_evidence(roofline, total_ns))

    kind: BottleneckKind
    busiest = max(v for v in (mem, comp, 0.0) if v is not None)
    if all(k.metrics.get("duration_ns", 0.0) < LAUNCH_FLOOR_NS for k in kernels) and busiest < SATURATED:
        kind = "launch"
        evidence.append(
            f"every kernel runs under {LAUNCH_FLOOR_NS / 1e3:.0f} µs with no unit saturated: launch overhead and "
            "ramp-up dominate"
        )
    elif mem is not None and mem >= SATURATED and mem >= (comp or 0.0):
        kind = "memory"
    elif comp is not None and comp >= SATURATED:
        kind = "compute"
    elif mem is None and comp is None:
        kind, note = _without_counters(roofline, total_ns)
        evidence.append(note)
    else:
        kind = "latency"
        evidence.append(f"no unit reaches {SATURATED:.0f}% of peak: warps wait on latency the kernel does not hide")
    stalls = _stalls(main)
    if stalls:
        evidence.append(stalls)
    evidence.extend(_resources(main))
    for facts in sass:
        if facts.kernel == main.name or main.name.startswith(facts.kernel):
            evidence.extend(f"SASS: {fact}" for fact in facts.facts)
    return Bottleneck(kind=kind, evidence=evidence)
