"""Compile captured Triton launches for Hopper (sm_90) without a GPU and report what came out.

    TRITON_INTERPRET=0 python3 tests/wiki_sm90_compile.py launches.json > report.json

Each launch names a kernel file, the @triton.jit function, its signature, constexprs, the
arguments divisible by 16 (the alignment Triton's JIT would have specialised on) and the launch
options. Must run in a process that never ran the interpreter (the interpreter patches
triton.language). Constexprs named WIDEN are forced off: they only exist for the interpreter.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
PTX_FACTS = ("wgmma.mma_async", "mma.sync", "ld.global.v4", "ld.global.v2", "div.rn.f32", "div.full.f32")


def _resources(cubin: bytes) -> tuple[int | None, int | None]:
    """(registers per thread, stack bytes per thread — nonzero means spills) from cuobjdump."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(CUOBJDUMP), "-res-usage", f.name], capture_output=True, text=True).stdout
    regs, stack = re.search(r"REG:(\d+)", out), re.search(r"STACK:(\d+)", out)
    return (int(regs.group(1)) if regs else None, int(stack.group(1)) if stack else None)


def compile_launch(launch: dict, module) -> dict:
    constexprs = {k: (False if k == "WIDEN" else v) for k, v in launch["constexprs"].items()}
    attrs = {(i,): [["tt.divisibility", 16]] for i in launch["div16"]}
    src = ASTSource(getattr(module, launch["kernel"]), launch["signature"], constexprs, attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=launch["options"])
    regs, stack = _resources(kernel.asm["cubin"])
    ptx = kernel.asm["ptx"]
    return {
        "registers": regs,
        "stack_bytes": stack,
        "shared_bytes": kernel.metadata.shared,
        "ptx": {fact: ptx.count(fact) for fact in PTX_FACTS if fact in ptx},
    }


def main(path: str) -> int:
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("run with TRITON_INTERPRET=0", file=sys.stderr)
        return 2
    modules, report = {}, []
    for launch in json.loads(Path(path).read_text()):
        file = launch["file"]
        if file not in modules:
            spec = importlib.util.spec_from_file_location(f"wiki_kernel_{Path(file).stem}", file)
            modules[file] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(modules[file])
        row = {"file": Path(file).stem, "kernel": launch["kernel"]}
        try:
            row.update(ok=True, **compile_launch(launch, modules[file]))
        except Exception as exc:  # noqa: BLE001 - a compile error is the finding, reported per kernel
            row.update(ok=False, error=f"{type(exc).__name__}: {str(exc).strip()[-1500:]}")
        report.append(row)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
