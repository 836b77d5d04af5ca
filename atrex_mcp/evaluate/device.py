"""The trusted side's view of the device: name, size, clocks and throttle reasons (NVML
through ctypes, so nothing extra needs installing), read outside the sandbox."""

from __future__ import annotations

import ctypes
import platform
import statistics
import threading
from functools import cache

import torch

from atrex_mcp.evaluate.models import DeviceInfo

_CLOCK_SM, _CLOCK_MEM = 1, 2
_THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


class _Nvml:
    """The few NVML calls needed, on the GPU torch calls device 0."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit failed")
        self.handle = ctypes.c_void_p()
        props = torch.cuda.get_device_properties(0)
        bus = getattr(props, "pci_bus_id", None)
        found = False
        if bus is not None:
            domain, device = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
            pci = f"{domain:08x}:{bus:02x}:{device:02x}.0".encode()
            found = self.lib.nvmlDeviceGetHandleByPciBusId_v2(ctypes.c_char_p(pci), ctypes.byref(self.handle)) == 0
        if not found and self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.handle)) != 0:
            raise OSError("no NVML handle for device 0")

    def _uint(self, fn: str, *args: int) -> int | None:
        value = ctypes.c_uint()
        return value.value if getattr(self.lib, fn)(self.handle, *args, ctypes.byref(value)) == 0 else None

    def clocks(self) -> tuple[int | None, int | None, int | None]:
        """(SM clock, memory clock, max SM clock) in MHz."""
        return (
            self._uint("nvmlDeviceGetClockInfo", _CLOCK_SM),
            self._uint("nvmlDeviceGetClockInfo", _CLOCK_MEM),
            self._uint("nvmlDeviceGetMaxClockInfo", _CLOCK_SM),
        )

    def throttle_reasons(self) -> list[str]:
        mask = ctypes.c_ulonglong()
        if self.lib.nvmlDeviceGetCurrentClocksThrottleReasons(self.handle, ctypes.byref(mask)) != 0:
            return []
        return [name for bit, name in _THROTTLE_REASONS.items() if mask.value & bit]

    def name(self) -> str | None:
        buf = ctypes.create_string_buffer(96)
        return buf.value.decode() if self.lib.nvmlDeviceGetName(self.handle, buf, 96) == 0 else None

    def driver(self) -> str | None:
        buf = ctypes.create_string_buffer(96)
        return buf.value.decode() if self.lib.nvmlSystemGetDriverVersion(buf, 96) == 0 else None


@cache
def _nvml() -> _Nvml | None:
    try:
        return _Nvml()
    except (OSError, AttributeError):
        return None


def has_gpu() -> bool:
    return torch.cuda.is_available()


def clocks_now() -> tuple[int | None, int | None, list[str]]:
    """(SM MHz, memory MHz, throttle reasons) right now; Nones without NVML."""
    nvml = _nvml() if has_gpu() else None
    if nvml is None:
        return None, None, []
    sm, mem, _ = nvml.clocks()
    return sm, mem, nvml.throttle_reasons()


def describe() -> DeviceInfo:
    if not has_gpu():
        return DeviceInfo(kind="cpu", name=platform.processor() or platform.machine())
    props = torch.cuda.get_device_properties(0)
    info = DeviceInfo(
        kind="cuda",
        name=props.name,
        sm_count=props.multi_processor_count,
        l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0) or None,
        memory_bytes=props.total_memory,
        cuda=torch.version.cuda,
    )
    nvml = _nvml()
    if nvml is not None:
        info.name = nvml.name() or info.name
        info.driver = nvml.driver()
        info.sm_clock_mhz, info.mem_clock_mhz, info.max_sm_clock_mhz = nvml.clocks()
        info.throttle_reasons = nvml.throttle_reasons()
    return info


class ClockSampler:
    """Samples the SM clock on a thread while a timing request runs, so the clocks reported
    are those of the timed loop (a reading taken afterwards finds an idle GPU at ~345 MHz)."""

    def __init__(self, interval_s: float = 0.002):
        self.interval_s = interval_s
        self.sm: list[int] = []
        self.mem: list[int] = []
        self.max_sm: int | None = None
        self.reasons: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ClockSampler:
        nvml = _nvml() if has_gpu() else None
        if nvml is not None:
            self._thread = threading.Thread(target=self._sample, args=(nvml,), daemon=True)
            self._thread.start()
        return self

    def _sample(self, nvml: _Nvml) -> None:
        while not self._stop.wait(self.interval_s):
            sm, mem, self.max_sm = nvml.clocks()
            if sm is not None:
                self.sm.append(sm)
                self.mem.append(mem or 0)
                self.reasons.update(r for r in nvml.throttle_reasons() if r != "gpu_idle")

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)

    def summary(self) -> tuple[int | None, int | None, float | None, list[str]]:
        """(median SM MHz, median memory MHz, fraction of samples with SM below 95 % of max,
        throttle reasons seen other than idle)."""
        if not self.sm:
            return None, None, None, []
        below = sum(s < 0.95 * self.max_sm for s in self.sm) / len(self.sm) if self.max_sm else None
        return int(statistics.median(self.sm)), int(statistics.median(self.mem)), below, sorted(self.reasons)
