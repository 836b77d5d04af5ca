"""Facts from a kernel's machine code (SASS via cuobjdump): is it on the Hopper tensor-core
path (HGMMA), are its global loads vectorised (128-bit LDG), does it touch local memory
(spills), does it use TMA or cp.async. Static facts: what the code can do, not how often."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from atrex_mcp.profiling.models import SassFacts
from sandbox import scratch as scratch_files

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")
_WIDTH = {"U8": "8", "S8": "8", "U16": "16", "S16": "16", "64": "64", "128": "128", "ENL2.256": "256"}


def cuobjdump_executable() -> str | None:
    """cuobjdump on PATH, in the CUDA toolkit, or the copy Triton ships with its NVIDIA backend."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    candidates = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "cuobjdump"]
    try:
        import triton

        candidates.append(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")
    except ImportError:
        pass
    return next((str(p) for p in candidates if p.is_file() and os.access(p, os.X_OK)), None)


def dump_sass(cubin: Path, *, cuobjdump: str | None = None, timeout_s: float = 60.0) -> str | None:
    """SASS text of a cubin, or None when cuobjdump is unavailable or fails."""
    tool = cuobjdump or cuobjdump_executable()
    if tool is None:
        return None
    proc = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, timeout=timeout_s)
    return proc.stdout if proc.returncode == 0 else None


def _width(opcode: str) -> str:
    """Access width in bits of an LDG/STG opcode such as LDG.E.128 or STG.E.U16 (plain = 32)."""
    suffix = opcode.split(".", 2)[2] if opcode.count(".") >= 2 else ""
    for key, bits in _WIDTH.items():
        if suffix == key or suffix.startswith(key + ".") or suffix.endswith("." + key):
            return bits
    return "32"


def _facts_of(kernel: str, opcodes: list[str]) -> SassFacts:
    counts = Counter(op.split(".")[0] for op in opcodes)
    loads = Counter(_width(op) for op in opcodes if op.startswith("LDG."))
    stores = Counter(_width(op) for op in opcodes if op.startswith("STG."))
    tma = sum(counts[k] for k in ("UTMALDG", "UTMASTG", "UBLKCP", "UTMAPF"))
    facts = SassFacts(
        kernel=kernel,
        instructions=len(opcodes),
        hgmma=counts["HGMMA"],
        hmma=counts["HMMA"],
        global_loads=dict(sorted(loads.items())),
        global_stores=dict(sorted(stores.items())),
        local_loads=counts["LDL"],
        local_stores=counts["STL"],
        tma=tma,
        cp_async=counts["LDGSTS"],
    )
    facts.facts = _sentences(facts)
    return facts


def _sentences(f: SassFacts) -> list[str]:
    out = []
    if f.hgmma:
        out.append(f"HGMMA present ({f.hgmma} instructions): Hopper warpgroup tensor-core path (wgmma)")
    elif f.hmma:
        out.append(f"HMMA only ({f.hmma}): tensor cores through mma.sync, not Hopper's wgmma")
    total_loads = sum(f.global_loads.values())
    if total_loads:
        wide = f.global_loads.get("128", 0)
        widths = ", ".join(f"{n}×{bits}-bit" for bits, n in sorted(f.global_loads.items(), key=lambda kv: -int(kv[0])))
        out.append(
            f"global loads: {widths}"
            + (" (vectorised 128-bit loads present)" if wide else " (no 128-bit vectorised loads)")
        )
    if f.local_loads or f.local_stores:
        out.append(f"local memory: {f.local_loads} LDL / {f.local_stores} STL (register spills or local arrays)")
    else:
        out.append("no local-memory instructions (no spills)")
    if f.tma:
        out.append(f"TMA bulk copies: {f.tma}")
    if f.cp_async:
        out.append(f"cp.async (LDGSTS): {f.cp_async}")
    return out


def parse_sass(text: str) -> list[SassFacts]:
    """Facts per function of a cuobjdump -sass listing."""
    kernels: list[SassFacts] = []
    name: str | None = None
    opcodes: list[str] = []
    for line in text.splitlines():
        header = _FUNCTION.match(line)
        if header:
            if name is not None:
                kernels.append(_facts_of(name, opcodes))
            name, opcodes = header.group(1), []
            continue
        if name is not None:
            match = _INSTRUCTION.match(line)
            if match:
                opcodes.append(match.group(1))
    if name is not None:
        kernels.append(_facts_of(name, opcodes))
    return kernels


MAX_CUBIN_BYTES = 64 << 20


def sass_facts_from_cache(cache_dir: Path, *, cuobjdump: str | None = None) -> list[SassFacts]:
    """Facts for every kernel Triton compiled into `cache_dir` (one fresh cache per profile).
    The profiled worker could write that cache: each cubin is read without following a link
    (sandbox.scratch) and cuobjdump runs on a private copy, never on the candidate's path."""
    facts: list[SassFacts] = []
    with tempfile.TemporaryDirectory(prefix="atrex-sass-") as private:
        copy = Path(private) / "kernel.cubin"
        for _name, data in scratch_files.regular_files(Path(cache_dir), ".cubin", MAX_CUBIN_BYTES):
            copy.write_bytes(data)
            text = dump_sass(copy, cuobjdump=cuobjdump)
            if text:
                facts.extend(parse_sass(text))
    return facts
