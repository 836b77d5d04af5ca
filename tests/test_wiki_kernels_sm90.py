"""Every wiki kernel compiles for Hopper (sm_90) on a CPU machine — Triton's NVIDIA backend and
its bundled ptxas need no GPU — and spills no registers at the smoke shape's launch
configuration. The interpreter cannot see compile-time errors (a loop-carried value changing
type, an unsupported op, a layout the backend rejects); this catches them before GPU time is
spent. Launch arguments are captured by running each Model under the interpreter; compilation
runs in a fresh process (the interpreter patches triton.language)."""

import importlib.util
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.wiki.corpus import kernel_front_matter

ROOT = Path(__file__).resolve().parent.parent
KERNELS = sorted(p for p in (ROOT / "gpu_wiki" / "kernels").glob("*.py") if not p.name.startswith("_"))
TORCH_TO_TRITON = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float32: "fp32",
    torch.float8_e4m3fn: "fp8e4nv",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
    torch.int8: "i8",
    torch.bool: "i1",
}
LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "maxnreg"}

interpreter = pytest.importorskip("triton.runtime.interpreter")
if not (Path(sys.modules["triton"].__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").is_file():
    pytest.skip("this Triton build has no NVIDIA backend with ptxas", allow_module_level=True)


def _launch_spec(path: Path, fn, args, kwargs) -> dict:
    """Signature, constexprs, 16-divisible arguments and options, as Triton's JIT would derive them."""
    params = list(inspect.signature(fn).parameters.values())
    values = dict(zip([p.name for p in params], args)) | {k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS}
    signature, constexprs, div16 = {}, {}, []
    for i, p in enumerate(params):
        v = values.get(p.name, p.default)
        if "constexpr" in str(p.annotation) or v is None or (isinstance(v, int) and not isinstance(v, bool) and v == 1):
            signature[p.name], constexprs[p.name] = "constexpr", v
        elif isinstance(v, torch.Tensor):
            signature[p.name] = "*" + TORCH_TO_TRITON[v.dtype]
            div16.append(i)  # device allocations are 16-byte aligned
        elif isinstance(v, bool):
            signature[p.name] = "i1"
        elif isinstance(v, int):
            signature[p.name] = "i64" if abs(v) >= 2**31 else "i32"
            if v % 16 == 0:
                div16.append(i)
        else:
            signature[p.name] = "fp32"
    return {
        "file": str(path),
        "kernel": fn.__name__,
        "signature": signature,
        "constexprs": constexprs,
        "div16": div16,
        "options": {k: v for k, v in kwargs.items() if k in LAUNCH_OPTIONS},
    }


@pytest.fixture(scope="module")
def sm90_report(tmp_path_factory):
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("launch capture needs the Triton interpreter (a CUDA machine compiles kernels for real)")
    catalog, launches, seen = Catalog(), [], set()
    original = interpreter.InterpretedFunction.run

    def recording_run(self, *args, grid, warmup, **kwargs):
        if (current, self.fn.__name__) not in seen:
            seen.add((current, self.fn.__name__))
            launches.append(_launch_spec(current, self.fn, args, kwargs))
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    interpreter.InterpretedFunction.run = recording_run
    try:
        for current in KERNELS:
            meta, _ = kernel_front_matter(current.read_text(), current.name)
            spec = importlib.util.spec_from_file_location(f"wiki_capture_{current.stem}", current)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            shape = catalog.visible(meta["operator"]).smoke_shape
            module.Model(**shape.init)(**catalog.load_make_inputs(meta["operator"])(seed=0, **shape.inputs))
    finally:
        interpreter.InterpretedFunction.run = original
    spec_path = tmp_path_factory.mktemp("sm90") / "launches.json"
    spec_path.write_text(json.dumps(launches))
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "wiki_sm90_compile.py"), str(spec_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    print(
        "\n"
        + "\n".join(
            f"{r['file']:28s} {r['kernel']:22s} regs={r.get('registers')} stack={r.get('stack_bytes')} "
            f"ptx={r.get('ptx')}"
            for r in report
        )
    )
    return report


@pytest.mark.slow
def test_every_kernel_file_was_compiled(sm90_report):
    assert {r["file"] for r in sm90_report} == {p.stem for p in KERNELS}


@pytest.mark.slow
def test_kernels_compile_for_sm90_without_spills(sm90_report):
    failures = [(r["file"], r["kernel"], r["error"][-400:]) for r in sm90_report if not r["ok"]]
    assert not failures, failures
    spills = [(r["file"], r["kernel"], r["stack_bytes"]) for r in sm90_report if r["stack_bytes"]]
    assert not spills, f"register spills (stack bytes per thread): {spills}"
