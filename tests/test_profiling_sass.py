"""SASS facts: a hand-written cuobjdump listing, and (where Triton's bundled ptxas/cuobjdump
exist, as on Linux wheels) a real kernel compiled for sm_90a on this CPU machine."""

import os
import subprocess
import sys

import pytest

from atrex_mcp.profiling.sass import cuobjdump_executable, dump_sass, parse_sass, sass_facts_from_cache

LISTING = """
	code for sm_90a
		Function : _rms_kernel
	.headerflags	@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                      /* 0x00000a00ff017b82 */
        /*0010*/                   S2R R0, SR_TID.X ;                                          /* 0x0000000000007919 */
        /*0020*/              @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;                          /* 0x0000000402048981 */
        /*0030*/                   LDG.E.U16 R8, desc[UR4][R6.64] ;                            /* 0x0000000406087981 */
        /*0040*/                   STL.64 [R1], R4 ;                                           /* 0x0000000401007387 */
        /*0050*/                   LDL.64 R4, [R1] ;                                           /* 0x0000000001047983 */
        /*0060*/               @P1 STG.E.128 desc[UR4][R10.64], R4 ;                          /* 0x000000040a001986 */
        /*0070*/                   EXIT ;                                                      /* 0x000000000000794d */
		Function : _mm_kernel
        /*0000*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;        /* 0x0000000004187df0 */
        /*0010*/                   UTMALDG.2D [UR8], [UR10] ;                                  /* 0x0000000008007db4 */
        /*0020*/                   EXIT ;                                                      /* 0x000000000000794d */
"""


def test_parse_hand_written_listing():
    rms, mm = parse_sass(LISTING)
    assert (rms.kernel, rms.instructions, rms.hgmma) == ("_rms_kernel", 8, 0)
    assert rms.global_loads == {"128": 1, "16": 1} and rms.global_stores == {"128": 1}
    assert (rms.local_loads, rms.local_stores) == (1, 1)
    assert any("vectorised 128-bit loads present" in f for f in rms.facts)
    assert any("register spills" in f for f in rms.facts)
    assert (mm.hgmma, mm.tma) == (1, 1) and mm.facts[0].startswith("HGMMA present")


COMPILE_SM90 = """
import sys
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

@triton.jit
def tile_dot(a, b, c, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(a + offs[:, None] * BLOCK + offs[None, :])
    y = tl.load(b + offs[:, None] * BLOCK + offs[None, :])
    tl.store(c + offs[:, None] * BLOCK + offs[None, :], tl.dot(x, y))

src = triton.compiler.ASTSource(fn=tile_dot, signature={"a": "*bf16", "b": "*bf16", "c": "*fp32", "BLOCK": "constexpr"},
                                constexprs={"BLOCK": 64})
compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
open(sys.argv[1], "wb").write(compiled.asm["cubin"])
"""


@pytest.mark.skipif(cuobjdump_executable() is None, reason="no cuobjdump (CUDA toolkit or Triton's NVIDIA backend)")
def test_real_sm90_kernel_shows_hgmma(tmp_path):
    """Compiled in a child without TRITON_INTERPRET (the interpreter cannot emit machine code)."""
    (tmp_path / "k").mkdir()
    cubin = tmp_path / "k" / "tile_dot.cubin"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = tmp_path / "compile_sm90.py"  # @triton.jit needs its source in a file
    script.write_text(COMPILE_SM90)
    proc = subprocess.run(
        [sys.executable, str(script), str(cubin)], env=env, capture_output=True, text=True, timeout=300
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot compile for sm_90 here: {proc.stderr.strip().splitlines()[-1:]}")
    assert dump_sass(cubin)
    (facts,) = sass_facts_from_cache(tmp_path)
    assert facts.kernel == "tile_dot" and facts.hgmma > 0 and facts.local_loads == 0
    assert any(f.startswith("HGMMA present") for f in facts.facts)
