"""Hardware profiles as data: peak rates per dtype path, HBM bandwidth and a few device facts,
each value carrying the source it was taken from.

The profiles live in atrex_mcp/problemset/hardware_profiles/<name>.json. `h200` (vendor datasheet, dense)
is the default roofline basis; `h200-measured` holds what library kernels reached on one H200,
so a kernel can legitimately beat a T_SOL computed on it.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atrex_mcp.errors import AtrexError, unknown_choice

PROFILES_DIR = Path(__file__).resolve().parent / "hardware_profiles"
DEFAULT_PROFILE = "h200"

DtypePath = Literal["bf16", "fp16", "fp8_e4m3", "tf32", "fp32", "int"]
DTYPE_PATHS: tuple[DtypePath, ...] = get_args(DtypePath)

# SPEC dtype labels that are not themselves path names.
_LABEL_ALIASES: dict[str, DtypePath] = {"int32": "int", "int64": "int", "int8": "int", "fp8": "fp8_e4m3"}


def dtype_path(label: str) -> DtypePath:
    """The peak a SPEC dtype label selects (`int32` -> `int`, `fp8_e4m3` -> the fp8 peak, ...)."""
    if label in DTYPE_PATHS:
        return label
    try:
        return _LABEL_ALIASES[label]
    except KeyError:
        raise unknown_choice("dtype_label", label, [*DTYPE_PATHS, *_LABEL_ALIASES]) from None


class SourcedValue(BaseModel):
    """A figure and where it comes from; `value` is null where no trustworthy figure exists."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float | None = Field(description="The figure in the unit its field names, or null when unknown.")
    source: str = Field(min_length=1, description="Where the figure comes from (document, measurement, derivation).")


class HardwareProfile(BaseModel):
    """Peaks of one accelerator, the inputs of the roofline T_SOL = max(sum W_d/P_d, Q/B)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Profile name as passed to --hardware.")
    description: str = Field(description="What the profile describes and on which basis (datasheet or measured).")
    peaks: dict[DtypePath, SourcedValue] = Field(
        description="Peak arithmetic rate per dtype path in FLOP/s (operations/s for int); all six paths present."
    )
    hbm_bandwidth: SourcedValue = Field(description="Peak HBM bandwidth in bytes/s (bytes read + written).")
    sm_count: SourcedValue = Field(description="Streaming multiprocessors (or compute units).")
    l2_bytes: SourcedValue = Field(description="L2 cache size in bytes.")
    sm_clock_mhz: SourcedValue = Field(description="Maximum SM clock in MHz.")
    memory_clock_mhz: SourcedValue = Field(description="Memory clock in MHz.")

    @field_validator("peaks")
    @classmethod
    def _all_paths(cls, peaks: dict[DtypePath, SourcedValue]) -> dict[DtypePath, SourcedValue]:
        missing = [p for p in DTYPE_PATHS if p not in peaks]
        if missing:
            raise ValueError(f"peaks lacks dtype paths {missing} (write null with a source where unknown)")
        return peaks

    @field_validator("hbm_bandwidth")
    @classmethod
    def _bandwidth_known(cls, bw: SourcedValue) -> SourcedValue:
        if bw.value is None or bw.value <= 0:
            raise ValueError("hbm_bandwidth must be a positive number: every roofline needs it")
        return bw

    def peak(self, path: DtypePath) -> float:
        """Peak rate of one dtype path; an error when the profile has no figure for it."""
        value = self.peaks[path].value
        if value is None:
            raise AtrexError(
                "input",
                "missing_peak",
                f"Hardware profile {self.name!r} has no {path} peak ({self.peaks[path].source}).",
                "Use a profile with that peak (e.g. h200) or add the figure with its source.",
            )
        return value

    def has_peak(self, path: DtypePath) -> bool:
        return self.peaks[path].value is not None


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.json"))


@cache
def load_profile(name: str = DEFAULT_PROFILE) -> HardwareProfile:
    """The named profile; an unknown name is answered with the valid ones."""
    if name not in profile_names():
        raise unknown_choice("hardware", name, profile_names())
    return HardwareProfile.model_validate(json.loads((PROFILES_DIR / f"{name}.json").read_text()))


def load_all_profiles() -> dict[str, HardwareProfile]:
    return {name: load_profile(name) for name in profile_names()}
