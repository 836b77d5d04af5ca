"""The one-pass comparison (atrex_mcp.evaluate.compare_kernel) gives the torch rule's verdicts and
figures bit for bit: counts, max abs/rel error, the first bad element and its values, the atol the
RMS cap leaves. Each check runs twice: on CPU tensors through Triton's interpreter (mark
`interpreter`, skipped on a GPU host) and on CUDA tensors (mark `gpu`), the torch rule on the
same device as the kernel."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from atrex_mcp.evaluate import compare, compare_kernel
from atrex_mcp.evaluate.compare import RMS_BLOCK, compare_outputs

DEVICES = [pytest.param("cpu", marks=pytest.mark.interpreter), pytest.param("cuda", marks=pytest.mark.gpu)]
FLOATS = [torch.bfloat16, torch.float16, torch.float32, torch.float64]
BLOCK = compare_kernel.BLOCK
NAN, INF = math.nan, math.inf


def both_paths(ref, cand, *, chunk: int, op: str = "x"):
    """The verdicts of the torch rule and of the one pass on the same tensors; they must be equal."""
    torch_rule = compare_outputs(ref, cand, op, chunk=chunk, one_pass=False)
    one_pass = compare_outputs(ref, cand, op, chunk=chunk, one_pass=True)
    assert one_pass == torch_rule, f"\ntorch:    {torch_rule}\none pass: {one_pass}"
    return torch_rule


def noisy_pair(dtype, n: int, seed: int, device: str, scale: float = 1.0):
    """A reference and a candidate off by noise about the size of the tolerance (some elements
    pass, some fail), zeros in the reference, and NaN/±inf planted on either or both sides:
    agreeing (NaN/NaN, +inf/+inf, -inf/-inf) and not (NaN/value, value/inf, +inf/-inf, inf/NaN)."""
    gen = torch.Generator().manual_seed(seed)
    ref64 = torch.randn(n, generator=gen, dtype=torch.float64) * scale
    cand64 = ref64 * (1 + 0.05 * torch.randn(n, generator=gen, dtype=torch.float64))
    cand64 += 0.01 * scale * torch.randn(n, generator=gen, dtype=torch.float64)
    ref64[:: max(n // 50, 1)] = 0.0
    planted = {
        3: (NAN, NAN),
        n // 3: (INF, INF),
        n // 3 + 1: (-INF, -INF),
        n // 2: (NAN, 1.0),
        n // 2 + 1: (1.0, NAN),
        n // 2 + 2: (2.0, INF),
        n // 2 + 3: (INF, -INF),
        n // 2 + 4: (-INF, 5.0),
        n - 2: (INF, NAN),
    }
    for i, (r, c) in planted.items():
        ref64[i], cand64[i] = r, c
    return ref64.to(dtype).to(device), cand64.to(dtype).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("chunk", [1000, BLOCK, 1 << 23], ids=["chunk-1000", "chunk-BLOCK", "one-chunk"])
def test_allclose_figures_equal_the_torch_rules(device, dtype, chunk):
    """Random data with planted non-finite values, zeros in the reference, a size that is no
    multiple of the kernel's block or of the chunk, judged in several chunks or one."""
    ref, cand = noisy_pair(dtype, 2 * BLOCK + 777, seed=FLOATS.index(dtype), device=device)
    verdict = both_paths(ref, cand, chunk=chunk)
    detail = verdict.details[0]
    assert not verdict.ok and 0 < detail.mismatches < detail.numel
    assert detail.nonfinite_mismatches == 6 and detail.max_rel_error > 0


@pytest.mark.parametrize("device", DEVICES)
def test_the_figures_do_not_depend_on_how_the_output_is_split_into_launches(device):
    """compare_outputs launches the kernel once for a candidate on the reference's device and
    once a chunk for one it moves from host memory: the figures merge to the same."""
    from atrex_mcp.evaluate.compare_kernel import judge_chunks

    ref, cand = noisy_pair(torch.float32, 3 * BLOCK + 5, seed=4, device=device)
    whole = judge_chunks(compare._chunks(ref.numel(), ref, cand), exact=False, atol=0.01, rtol=0.05)
    assert whole.mismatches and whole.first is not None and whole.max_abs > 0
    for chunk in (777, BLOCK, BLOCK + 1):
        assert judge_chunks(compare._chunks(chunk, ref, cand), exact=False, atol=0.01, rtol=0.05) == whole


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scale", [1e-3, 1e30])
def test_the_rms_capped_atol_and_large_values_agree(device, scale):
    """A reference of magnitude 1e-3 (the RMS caps atol) and one of 1e30 (squares past fp32's
    range, |c − r| large) give the same atol and figures on both paths."""
    ref, cand = noisy_pair(torch.float32, 3 * RMS_BLOCK + 5, seed=11, device=device, scale=scale)
    detail = both_paths(ref, cand, chunk=5000).details[0]
    assert detail.mismatches and (detail.atol < 0.01) == (scale < 1)


def _exact_bound(refabs: float, rtol: float, atol: float) -> float:
    """rtol·|r| + atol rounded once (what a fused multiply-add gives)."""
    exact = Fraction(refabs) * Fraction(rtol) + Fraction(atol)
    return float(exact)  # Fraction → float rounds to nearest


def boundary_pair(device: str, seed: int = 7):
    """float64 outputs whose candidates lie on the tolerance's edge: |c − r| equal to the bound
    (within), an ulp above it (outside), and between the bound rounded twice (the rule's
    `refabs.mul(rtol).add_(atol)`) and rounded once (a fused multiply-add), where contracting the
    rule's arithmetic would flip the verdict. Returns (ref, cand, flat indices of the FMA cases)."""
    rng = np.random.default_rng(seed)
    n = BLOCK + 300
    ref = rng.standard_normal(n)  # RMS ≈ 1: atol stays 1e-2
    cand = ref + 0.001 * rng.standard_normal(n)
    rtol, atol = 0.05, 0.01
    edges, flips = [], []
    for r in rng.uniform(1e-3, 1e-2, 20000):  # |c| below the bound: c − r can land on every ulp of it
        twice = r * rtol + atol
        once = _exact_bound(r, rtol, atol)
        if once != twice and len(flips) < 60:
            targets, into = [max(once, twice)], flips
        elif once == twice and len(edges) < 60:
            targets, into = [twice, np.nextafter(twice, INF)], edges
        else:
            continue
        for target in targets:
            c = r - target
            for _ in range(8):  # walk c until fl(|c − r|) is the target
                got = abs(c - r)
                if got == target:
                    break
                c = np.nextafter(c, -INF if got < target else INF)
            if abs(c - r) == target:
                into.append((r, c))
    slots = range(5, n, n // (len(edges) + len(flips) + 1))
    for slot, (r, c) in zip(slots, edges + flips):
        ref[slot], cand[slot] = r, c
    flips = list(slots[len(edges) : len(edges) + len(flips)])
    return torch.from_numpy(ref).to(device), torch.from_numpy(cand).to(device), flips


@pytest.mark.parametrize("device", DEVICES)
def test_values_on_the_tolerance_edge_get_the_torch_verdict(device):
    ref, cand, flips = boundary_pair(device)
    assert len(flips) >= 20  # the data holds elements a fused multiply-add would judge otherwise
    detail = both_paths(ref, cand, chunk=1500).details[0]
    assert detail.atol == 0.01 and detail.mismatches > len(flips) // 2
    # the rule rounds the bound twice: an element is within exactly where |c − r| <= fl(fl(|r|·rtol) + atol)
    r, c = ref.cpu().numpy(), cand.cpu().numpy()
    within = np.abs(c - r) <= np.abs(r) * 0.05 + 0.01
    assert detail.mismatches == int((~within).sum())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("where", ["start", "block end", "block start", "chunk end", "mid chunk", "last"])
def test_the_first_bad_element_and_its_values(device, where):
    n, chunk = 3 * BLOCK + 13, 2500
    index = {
        "start": 0,
        "block end": BLOCK - 1,
        "block start": BLOCK,
        "chunk end": chunk - 1,
        "mid chunk": chunk + 1234,
        "last": n - 1,
    }[where]
    ref = torch.linspace(-3, 3, n, dtype=torch.float64).to(torch.bfloat16).to(device)
    cand = ref.clone()
    cand[index] = 7.5
    cand[-1] = 9.0  # a second bad element at the end (the same one when `where` is last)
    detail = both_paths(ref, cand, chunk=chunk).details[0]
    assert detail.first_bad_index == [index] and detail.mismatches == (1 if where == "last" else 2)
    assert detail.reference_value == ref[index].item() and detail.candidate_value == cand[index].item()


@pytest.mark.parametrize("device", DEVICES)
def test_multi_dimensional_and_transposed_outputs(device):
    ref, cand = noisy_pair(torch.bfloat16, 48 * 67, seed=3, device=device)
    ref, cand = ref.view(48, 67), cand.view(67, 48).t()  # the candidate not contiguous
    detail = both_paths(ref, cand, chunk=999).details[0]
    assert len(detail.first_bad_index) == 2 and detail.mismatches


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool], ids=str)
def test_exact_figures_equal_the_torch_rules(device, dtype):
    gen = torch.Generator().manual_seed(5)
    high = 2 if dtype == torch.bool else 100
    ref = torch.randint(0, high, (BLOCK + 999,), generator=gen).to(dtype)
    cand = ref.clone()
    cand[torch.randint(0, ref.numel(), (40,), generator=gen)] = torch.tensor(1 if dtype == torch.bool else 0).to(dtype)
    ref[:10] = 0  # zeros: no relative error there
    both_paths(ref.to(device), cand.to(device), chunk=1234)


@pytest.mark.parametrize("device", DEVICES)
def test_exact_int64_beyond_float64_precision(device):
    """2^53 and 2^53 + 1 are one float64: the rule compares the integers, the errors are float64's."""
    ref = torch.full((5,), 1 << 53, dtype=torch.int64, device=device)
    cand = ref.clone()
    cand[2] += 1
    detail = both_paths(ref, cand, chunk=2).details[0]
    assert detail.mismatches == 1 and detail.first_bad_index == [2] and detail.max_abs_error == 0.0


@pytest.mark.parametrize("device", DEVICES)
def test_exact_rule_on_floats_and_mixed_outputs(device):
    """An exact override on a float output (NaN never equals NaN), and an output of each rule."""
    ref = {"f": torch.tensor([1.0, NAN, 0.0, 2.0]), "i": torch.arange(6), "empty": torch.zeros(0, 3)}
    cand = {"f": torch.tensor([1.0, NAN, 0.5, 2.0]), "i": torch.arange(6) % 4, "empty": torch.zeros(0, 3)}
    on = {k: v.to(device) for k, v in ref.items()}, {k: v.to(device) for k, v in cand.items()}
    both_paths(*on, chunk=3)
    overrides = {("exact_op", "f"): compare.EXACT}
    saved = dict(compare.OVERRIDES)
    compare.OVERRIDES.update(overrides)
    try:
        verdict = both_paths(*on, chunk=3, op="exact_op")
    finally:
        compare.OVERRIDES.clear()
        compare.OVERRIDES.update(saved)
    assert verdict.details[1].rule == "exact" and verdict.details[1].mismatches == 2  # NaN and 0.5


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # numpy's, in the interpreter
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_square_sums_are_the_torch_block_sums_bit_for_bit(device, dtype):
    """The RMS pre-pass: per-block sums of squares of the finite values by the same pairwise tree
    (equal bits, so the exactly added RMS is equal too), and the count of finite values."""
    from atrex_mcp.evaluate.compare_kernel import square_sums

    ref, _ = noisy_pair(dtype, 3 * RMS_BLOCK + 77, seed=9, device=device, scale=1e3)
    if dtype == torch.float64:
        ref[5] = 1e200  # a square past float64's range: inf, on both paths
    sums, finite = square_sums(ref)
    r64 = ref.to(torch.float64)
    keep = torch.isfinite(r64)
    expected = compare._block_sums(torch.where(keep, r64, 0.0).square_()).cpu().numpy()
    assert np.array_equal(np.array(sums, dtype=np.float64).view(np.int64), expected.view(np.int64))
    assert finite == int(keep.sum())


@pytest.mark.parametrize("device", DEVICES)
def test_empty_and_scalar_outputs(device):
    both_paths(torch.zeros(0, 4, device=device), torch.zeros(0, 4, device=device), chunk=8)
    verdict = both_paths(torch.tensor(2.0, device=device), torch.tensor(3.0, device=device), chunk=8)
    assert verdict.details[0].first_bad_index == [] and verdict.details[0].mismatches == 1


@pytest.mark.interpreter
def test_refusals_name_what_the_kernel_takes():
    from atrex_mcp.evaluate.compare_kernel import judge_chunks, square_sums

    with pytest.raises(ValueError, match=r"does not take torch\.int32"):
        square_sums(torch.zeros(4, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"allclose rule does not take torch\.int32"):
        judge_chunks([(0, (torch.zeros(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)))], exact=False)
    with pytest.raises(ValueError, match="contiguous slices of one dtype"):
        judge_chunks([(0, (torch.zeros(4), torch.zeros(4, dtype=torch.float64)))], exact=False)


def test_cpu_outputs_take_the_torch_rule_without_loading_triton():
    """Importing the evaluator and judging CPU outputs loads neither Triton nor the kernel."""
    code = (
        "import sys, torch\n"
        "from atrex_mcp.evaluate import evaluator\n"
        "from atrex_mcp.evaluate.compare import compare_outputs\n"
        "assert not compare_outputs(torch.ones(9), torch.zeros(9), 'x').ok\n"
        "print(sorted(m for m in ('triton', 'atrex_mcp.evaluate.compare_kernel') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


@pytest.mark.gpu
def test_on_a_gpu_compare_outputs_takes_the_one_pass_with_the_torch_figures():
    """compare_outputs on CUDA outputs (its default path: the kernel) over many chunks of a few
    million elements, with a candidate on the GPU and one in host memory."""
    ref, cand = noisy_pair(torch.bfloat16, (1 << 22) + 3, seed=2, device="cuda")
    torch_rule = compare_outputs(ref, cand, "x", chunk=1 << 20, one_pass=False)
    assert compare.compare_outputs(ref, cand, "x", chunk=1 << 20) == torch_rule
    assert compare.compare_outputs(ref, cand.cpu(), "x", chunk=1 << 20) == torch_rule
    assert "atrex_mcp.evaluate.compare_kernel" in sys.modules


def test_the_kernels_build_for_the_h200_without_contraction():
    """Compiled for sm_90 (on any host) with the options the launches use (the fp8 rule's kernel
    too): no fused multiply-add in float64, IEEE division, no flushing of subnormals, relaxed
    int64 atomics on the state; the allclose and RMS kernels compiled with contraction do fuse,
    so the option is what keeps the bound and the RMS tree rounded as the torch rule rounds them."""
    code = """
import json, re, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from atrex_mcp.evaluate import compare_kernel as ck
aligned = [["tt.divisibility", 16]]
judge = {"ref_ptr": "*fp32", "cand_ptr": "*fp32", "state_ptr": "*i64", "n": "i64", "offset": "i64",
         "EXACT": "constexpr", "BLOCK": "constexpr"}
squares = {"ref_ptr": "*fp32", "sums_ptr": "*fp64", "counts_ptr": "*i32", "n": "i64", "BLOCK": "constexpr",
           "LEVELS": "constexpr"}
codes = {"ref_ptr": "*u8", "cand_ptr": "*u8", "state_ptr": "*i64", "n": "i64", "offset": "i64", "max_steps": "i32",
         "MANTISSA": "constexpr", "BIAS": "constexpr", "SPECIALS": "constexpr", "BLOCK": "constexpr"}
e5m2 = dict(zip(("MANTISSA", "BIAS", "SPECIALS"), ck._FP8_FORMATS[torch.float8_e5m2]))
kernels = {
    "judge": (ck._judge, judge, {"EXACT": False, "BLOCK": ck.BLOCK}),
    "square_sums": (ck._square_sums, squares, {"BLOCK": ck.RMS_BLOCK, "LEVELS": ck.LEVELS}),
    "judge_codes": (ck._judge_codes, codes, {**e5m2, "BLOCK": ck.BLOCK}),
}
found = {}
for name, (fn, signature, constants) in kernels.items():
    for build, options in (("launch", ck.LAUNCH), ("contracted", {**ck.LAUNCH, "enable_fp_fusion": True})):
        source = ASTSource(fn=fn, signature=signature, constexprs=constants, attrs={(0,): aligned})
        ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]
        found[f"{name} {build}"] = {
            "fma": len(re.findall(r"fma\\.rn\\.f64", ptx)),
            "div": sorted(set(re.findall(r"div\\.[a-z0-9.]+", ptx))),
            "ftz": len(re.findall(r"\\.ftz", ptx)),
            "relaxed": sorted(set(re.findall(r"(?:red|atom)\\.global\\.gpu\\.relaxed\\.([a-z]+)\\.[su]64", ptx))),
        }
print(json.dumps(found))
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["judge launch"] == {
        "fma": 0,
        "div": ["div.rn.f64"],
        "ftz": 0,
        "relaxed": ["add", "max", "min"],
    }
    assert found["square_sums launch"]["fma"] == 0 and found["square_sums launch"]["ftz"] == 0
    assert found["judge_codes launch"] == found["judge launch"]
    assert found["judge contracted"]["fma"] > 0 and found["square_sums contracted"]["fma"] > 0


@pytest.mark.gpu
def test_on_a_gpu_outputs_past_two_to_the_31_elements():
    """Flat indices past 2^31 (int64 index math in both kernels): 4 GiB bf16 outputs whose only
    bad elements lie past the 2^31st, judged by both paths."""
    n = (1 << 31) + 4099
    ref = torch.full((n,), 1.0, dtype=torch.bfloat16, device="cuda")
    cand = ref.clone()
    cand[(1 << 31) + 1] = 2.0
    cand[-1] = float("nan")
    detail = both_paths(ref, cand, chunk=compare.CHUNK_ELEMENTS).details[0]
    assert detail.mismatches == 2 and detail.nonfinite_mismatches == 1
    assert detail.first_bad_index == [(1 << 31) + 1] and detail.atol == 0.01


@pytest.mark.interpreter
def test_the_cost_measurement_dry_runs_on_cpu(tmp_path):
    """measurements/compare_cost_gpu.py at a tiny size: both paths timed, and they agree (a float
    output, and a quantiser's fp8 codes with their scales)."""
    from measurements.compare_cost_gpu import main

    out = tmp_path / "cost.json"
    assert main(["--out", str(out), "--sizes", "0.004", "--dtypes", "bf16,fp8", "--calls", "1"]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["dtype"], r["case"], r["ok"], r["agree"]) for r in rows] == [
        ("bf16", "close", True, True),
        ("bf16", "wrong", False, True),
        ("fp8", "close", True, True),
        ("fp8", "fp8_near", False, True),
        ("fp8", "wrong", False, True),
    ]
    assert rows[-1]["nonfinite_mismatches"] == 3  # NaN in the candidate only, twice; in the reference only, once
    assert all(r["torch"]["median_ms"] > 0 and r["one_pass"]["median_ms"] > 0 for r in rows)


FP8 = [getattr(torch, name) for name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")]


@triton.jit
def _decode_codes(codes_ptr, value_ptr, index_ptr, flags_ptr, MANTISSA: tl.constexpr, BIAS: tl.constexpr,
                  SPECIALS: tl.constexpr):  # fmt: skip
    """compare_kernel._fp8_decode of 256 codes, stored: the value, the index, NaN + 2 × finite."""
    i = tl.arange(0, 256)
    codes = tl.load(codes_ptr + i).to(tl.int32)
    value, index, nan, finite = compare_kernel._fp8_decode(codes, MANTISSA, BIAS, SPECIALS)
    tl.store(value_ptr + i, value)
    tl.store(index_ptr + i, index)
    tl.store(flags_ptr + i, nan.to(tl.int32) + 2 * finite.to(tl.int32))


def code_step(codes: torch.Tensor, steps: int | torch.Tensor) -> torch.Tensor:
    """fp8 codes (as uint8) moved `steps` positions along the number line (compare._code_index's
    order: ..., 0x81, 0x00, 0x01, ...)."""
    c = codes.to(torch.int32)
    index = torch.where(c >= 0x80, -(c & 0x7F), c & 0x7F) + steps
    return torch.where(index < 0, 0x80 | -index, index).to(torch.uint8)


def fp8_pair(dtype, n: int, seed: int, device: str, *, near: int = 0, far: int = 0):
    """A reference of finite fp8 codes (|values| well below the format's top, zeros included)
    and a candidate equal to it but for `near` codes one step away and `far` codes 2-5 steps
    away, at random places; both as uint8 codes, on the CPU."""
    gen = torch.Generator().manual_seed(seed)
    ref = (torch.randn(n, generator=gen) * 4).to(dtype).view(torch.uint8)
    ref[:: max(n // 40, 1)] = 0
    cand = ref.clone()
    places = torch.randperm(n, generator=gen)
    near_at, far_at = places[:near], places[near : near + far]
    cand[near_at] = code_step(ref[near_at], 1 - 2 * torch.randint(0, 2, (near,), generator=gen))
    cand[far_at] = code_step(ref[far_at], torch.randint(2, 6, (far,), generator=gen))
    return ref, cand


def fp8_judged(ref, cand, dtype, device, *, chunk: int = 1 << 23):
    """Both paths' verdict on uint8 codes read as `dtype` on `device`."""
    return both_paths(ref.view(dtype).to(device), cand.view(dtype).to(device), chunk=chunk)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_codes_decode_as_torch_decodes_them(device, dtype):
    """Every one of the 256 codes of each format: the kernel's float64 value (0 where not finite),
    its position on the number line, NaN and finiteness are torch's."""
    codes = torch.arange(256, dtype=torch.uint8, device=device)
    value = torch.empty(256, dtype=torch.float64, device=device)
    index, flags = (torch.empty(256, dtype=torch.int32, device=device) for _ in range(2))
    mantissa, bias, specials = compare_kernel._FP8_FORMATS[dtype]
    with compare_kernel._on(codes.device):
        _decode_codes[(1,)](codes, value, index, flags, MANTISSA=mantissa, BIAS=bias, SPECIALS=specials)
    expected = codes.view(dtype).to(torch.float64)
    finite = torch.isfinite(expected)
    assert torch.equal(value.view(torch.int64), torch.where(finite, expected, 0.0).view(torch.int64))  # -0.0 too
    assert torch.equal(index, compare._code_index(codes.view(dtype)))
    assert torch.equal(flags, torch.isnan(expected).int() + 2 * finite.int())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_every_pair_of_codes(device, dtype):
    """All 256 × 256 pairs of codes in one output (NaN, inf, ±0, the largest values): both tallies'
    figures equal, in one chunk and in uneven ones."""
    codes = torch.arange(256, dtype=torch.uint8)
    ref, cand = codes.repeat_interleave(256), codes.repeat(256)
    detail = fp8_judged(ref, cand, dtype, device).details[0]
    assert detail.mismatches > 60000 and detail.nonfinite_mismatches > 0 and detail.max_rel_error > 1
    fp8_judged(ref, cand, dtype, device, chunk=3 * BLOCK + 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FP8, ids=str)
@pytest.mark.parametrize("case", ["identical", "near under the fraction", "near over the fraction", "far"])
def test_fp8_figures_equal_the_torch_rules(device, dtype, case):
    """A size that is no multiple of the kernel's block: one-step codes on fewer than 1 % of the
    elements pass (the far-only tally: no mismatch, yet |c − r| > 0), on more they fail (every
    off code a mismatch); a code further away fails alone."""
    n = 2 * BLOCK + 777
    near, far = {"identical": (0, 0), "near under the fraction": (n // 200, 0), "near over the fraction": (n // 50, 0),
                 "far": (n // 200, 1)}[case]  # fmt: skip
    ref, cand = fp8_pair(dtype, n, seed=FP8.index(dtype), device=device, near=near, far=far)
    verdict = fp8_judged(ref, cand, dtype, device)
    detail = verdict.details[0]
    assert verdict.ok == (case in ("identical", "near under the fraction"))
    assert detail.mismatches == {"identical": 0, "near under the fraction": 0, "near over the fraction": near,
                                 "far": 1}[case]  # fmt: skip
    assert (detail.max_abs_error > 0) == (case != "identical") and detail.nonfinite_mismatches == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FP8, ids=str)
@pytest.mark.parametrize("where", ["reference", "candidate", "both"])
def test_fp8_nan(device, dtype, where):
    """NaN on one side is a non-finite mismatch in either tally; NaN on both sides agrees. The
    output also holds a few one-step codes (the far-only tally) and a far code after the NaN."""
    nan = {torch.float8_e4m3fn: 0x7F, torch.float8_e5m2: 0xFE}.get(dtype, 0x80)
    n = BLOCK + 500
    ref, cand = fp8_pair(dtype, n, seed=3, device=device, near=5)
    ref[700] = cand[700] = 0x3C
    cand[900] = code_step(ref[900:901], 3)[0]
    if where in ("reference", "both"):
        ref[700] = nan
    if where in ("candidate", "both"):
        cand[700] = nan
    detail = fp8_judged(ref, cand, dtype, device, chunk=1000).details[0]
    one_sided = where != "both"
    assert detail.nonfinite_mismatches == int(one_sided) and detail.mismatches == 1 + int(one_sided)
    assert detail.first_bad_index == [700 if one_sided else 900]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_negative_zero_against_zero(device, dtype):
    """0x80 against 0x00: the same position on the number line, so no mismatch, where 0x80 is
    -0; where it is the format's NaN (the fnuz formats) a non-finite mismatch."""
    ref = torch.zeros(BLOCK + 3, dtype=torch.uint8)
    cand = ref.clone()
    cand[[1, BLOCK + 2]] = 0x80
    detail = fp8_judged(ref, cand, dtype, device).details[0]
    nan = "fnuz" in str(dtype)
    assert detail.mismatches == detail.nonfinite_mismatches == (2 if nan else 0)
    assert detail.first_bad_index == ([1] if nan else None)


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_from_a_candidate_in_host_memory(device):
    """A candidate moved to the reference's device a chunk at a time (on the GPU through
    compare_outputs; on the CPU through the kernel's launches over uneven chunks): the figures
    of both tallies and the near count merge to those of the whole output."""
    from atrex_mcp.evaluate.compare_kernel import judge_codes

    n = 3 * BLOCK + 5
    for near in (n // 200, n // 50):  # the far-only tally, then the every-off one
        ref, cand = fp8_pair(torch.float8_e4m3fn, n, seed=near, device=device, near=near, far=2)
        ref, cand = ref.view(torch.float8_e4m3fn).to(device), cand.view(torch.float8_e4m3fn)
        whole = judge_codes(compare._chunks(n, ref, cand.to(device)), max_steps=1)
        assert whole.near == near and whole.far_only.mismatches == 2 and whole.every_off.mismatches == near + 2
        for chunk in (777, BLOCK, BLOCK + 1):
            assert judge_codes(compare._chunks(chunk, ref, cand), max_steps=1) == whole
        torch_rule = compare_outputs(ref, cand, "x", chunk=1000, one_pass=False)
        assert compare_outputs(ref, cand, "x", chunk=1000, one_pass=True) == torch_rule
        assert torch_rule.details[0].mismatches == (2 if near == n // 200 else near + 2)


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_random_sweep(device):
    """Seeded random outputs of each format, with scales as a quantiser returns them: codes moved
    by one step at rates on either side of the tolerated fraction, and on some trials codes moved
    further or set to any byte (NaN, inf, either zero) on either side; sizes around the block, the
    candidate judged whole or in chunks."""
    gen = torch.Generator().manual_seed(2026)
    verdicts = []
    for trial in range(16):
        dtype = FP8[trial % len(FP8)]
        n = int(torch.randint(1, 3 * BLOCK, (1,), generator=gen))
        ref, _ = fp8_pair(dtype, n, seed=trial, device=device)
        random_byte = torch.randint(0, 256, (n,), generator=gen, dtype=torch.uint8)
        step = 1 - 2 * torch.randint(0, 2, (n,), generator=gen)
        if trial % 3 == 0:  # further moves, and any byte at all
            further = torch.rand(n, generator=gen) < 0.2
            step = torch.where(further, step * torch.randint(2, 9, (n,), generator=gen), step)
        moved = torch.rand(n, generator=gen) < (0.004, 0.008, 0.015, 0.03)[trial % 4]
        cand = torch.where(moved, code_step(ref, step), ref)
        if trial % 3 == 0:
            cand = torch.where(torch.rand(n, generator=gen) < 0.003, random_byte, cand)
            ref = torch.where(torch.rand(n, generator=gen) < 0.003, random_byte.flip(0), ref)
        scales = torch.rand(max(n // 128, 1), generator=gen)
        chunk = int(torch.randint(100, 2 * n + 200, (1,), generator=gen))
        on = (ref.view(dtype).to(device), scales.to(device)), (cand.view(dtype).to(device), scales.to(device))
        detail = both_paths(*on, chunk=chunk).details[0]
        verdicts.append((detail.mismatches == 0, detail.max_abs_error > 0, detail.nonfinite_mismatches > 0))
    # passing with codes a step away, failing on many such codes, failing on NaN: each seen
    assert {(True, True, False), (False, True, False), (False, True, True)} <= set(verdicts)


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_empty_and_scalar_outputs(device):
    empty = torch.zeros(0, 4, dtype=torch.float8_e4m3fn, device=device)
    assert both_paths(empty, empty.clone(), chunk=8).ok
    ref, cand = (torch.tensor(v).to(torch.float8_e4m3fn).to(device) for v in (2.0, 2.25))  # one step apart
    detail = both_paths(ref, cand, chunk=8).details[0]
    assert detail.mismatches == 1 and detail.first_bad_index == [] and detail.max_abs_error == 0.25


@pytest.mark.gpu
def test_on_a_gpu_compare_outputs_judges_fp8_codes_in_one_pass():
    """compare_outputs on a quantiser's CUDA outputs (fp8 codes and fp32 scales) takes the one
    pass, with the torch rule's figures, for a candidate on the GPU and one in host memory, and
    under and over the tolerated share of one-step codes."""
    n = (1 << 22) + 3
    for near in (n // 200, n // 50):
        ref, cand = fp8_pair(torch.float8_e4m3fn, n, seed=near, device="cuda", near=near, far=3)
        ref, cand = ref.view(torch.float8_e4m3fn).cuda(), cand.view(torch.float8_e4m3fn).cuda()
        scales = torch.rand(n // 128, device="cuda")
        torch_rule = compare_outputs((ref, scales), (cand, scales), "x", chunk=1 << 20, one_pass=False)
        assert compare.compare_outputs((ref, scales), (cand, scales), "x", chunk=1 << 20) == torch_rule
        assert compare.compare_outputs((ref, scales), (cand.cpu(), scales.cpu()), "x", chunk=1 << 20) == torch_rule
        assert torch_rule.details[0].mismatches == (3 if near == n // 200 else near + 3)


@pytest.mark.gpu
def test_on_a_gpu_fp8_outputs_past_two_to_the_31_elements():
    """Flat indices past 2^31 in the fp8 kernel: 2 GiB outputs whose only off codes lie past the
    2^31st (a far one, a NaN, one a step away), judged by both paths."""
    n = (1 << 31) + 4099
    ref = torch.full((n,), 1.0, dtype=torch.float8_e4m3fn, device="cuda")
    cand = ref.clone()
    codes = cand.view(torch.uint8)
    codes[(1 << 31) + 1] = 0x48  # 4.0, 16 steps from 1.0
    codes[(1 << 31) + 2] = 0x39  # 1.125, one step
    codes[-1] = 0x7F  # NaN
    detail = both_paths(ref, cand, chunk=compare.CHUNK_ELEMENTS).details[0]
    assert detail.mismatches == 2 and detail.nonfinite_mismatches == 1
    assert detail.first_bad_index == [(1 << 31) + 1] and detail.max_abs_error == 3.0
