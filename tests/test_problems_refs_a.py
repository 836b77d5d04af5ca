"""Problem references, batch A (norms, SwiGLU, fp8 quantisers): each reference at its smoke
shape keeps the SPEC's output contract, is deterministic, leaves its inputs alone, and agrees
with an independent float64 / numpy-fp32 computation on tiny hand-built inputs; the scored
shapes equal the shared source data."""

from __future__ import annotations

import inspect
import json
from functools import cache
from typing import Any, Callable

import numpy as np
import pytest
import torch

from atrex_mcp.catalog import Catalog, Shape
from atrex_mcp.paths import REPO_ROOT

PROBLEMS = REPO_ROOT / "problems"
SHARED_SHAPES = REPO_ROOT.parent / "shared" / "atrex-ops" / "shapes"

BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
FN = torch.float8_e4m3fn

# op -> (container, fn(shape) -> [(key or tuple index or None, output shape, dtype)])
Outputs = Callable[[Shape], list[tuple[Any, tuple[int, ...], torch.dtype]]]


def _th(s: Shape) -> tuple[int, int]:
    return (s.inputs["token_count"], s.inputs["hidden_size"])


CONTRACTS: dict[str, tuple[str, Outputs]] = {
    "rms_norm": ("tensor", lambda s: [(None, _th(s), BF16)]),
    "silu_and_mul": ("tensor", lambda s: [(None, (s.inputs["shape"][0], s.inputs["shape"][1] // 2), BF16)]),
    "fused_add_rms_norm": ("dict", lambda s: [("out", _th(s), BF16), ("residual", _th(s), BF16)]),
    "fused_qk_rmsnorm": (
        "tensor",
        lambda s: [(None, (s.inputs["num_tokens"], (s.init["head_num"] + 2 * s.init["kv_head_num"]) * s.init["size_per_head"]), F16)],
    ),
    "gated_rms_norm": ("tensor", lambda s: [(None, (s.inputs["rows"], s.inputs["hidden_size"]), BF16)]),
    "l2_norm": ("tensor", lambda s: [(None, (s.inputs["num_tokens"], s.inputs["hidden_size"]), BF16)]),
    "layer_norm": ("tensor", lambda s: [(None, tuple(s.inputs["shape"]), BF16)]),
    "fp8_dynamic_per_token_quant": ("tuple", lambda s: [(0, _th(s), FN), (1, _th(s)[:1], F32)]),
    "per_token_group_quant_fp8": (
        "dict",
        lambda s: [
            ("quantized", _th(s), FN),
            ("scales", (s.inputs["token_count"], s.inputs["hidden_size"] // s.init["group_size"]), F32),
        ],
    ),
    "fused_rmsnorm_quant": (
        "tuple",
        lambda s: [(0, _th(s), FN), (1, (s.inputs["token_count"], 1), F32), (2, _th(s), BF16)],
    ),
}
OPS = list(CONTRACTS)


@cache
def _catalog() -> Catalog:
    return Catalog(PROBLEMS)


def _model(op: str, init: dict[str, Any]) -> torch.nn.Module:
    return _catalog().load_reference(op)(**init)


def _inputs(op: str, seed: int, **shape_inputs: Any) -> dict[str, torch.Tensor]:
    return _catalog().load_make_inputs(op)(seed=seed, **shape_inputs)


def _smoke(op: str) -> Shape:
    return _catalog().visible(op).smoke_shape


def _entries(out: Any, container: str) -> list[tuple[Any, torch.Tensor]]:
    if container == "tensor":
        assert isinstance(out, torch.Tensor)
        return [(None, out)]
    if container == "tuple":
        assert isinstance(out, tuple)
        return list(enumerate(out))
    assert isinstance(out, dict)
    return list(out.items())


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor, so that fp8 and NaN-bearing tensors compare bit-for-bit."""
    return t.detach().contiguous().view(-1).view(torch.uint8)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


# ---------------------------------------------------------------- shapes.json


@pytest.mark.parametrize("op", OPS)
def test_scored_shapes_equal_shared_data(op: str) -> None:
    shared_file = SHARED_SHAPES / f"{op}.json"
    if not shared_file.is_file():
        pytest.skip(f"shared operator data not present at {SHARED_SHAPES}")
    shared = json.loads(shared_file.read_text())["shapes"]
    scored = [s for s in json.loads((PROBLEMS / op / "shapes.json").read_text())["shapes"] if not s.get("smoke")]
    assert [s["id"] for s in scored] == [str(s["id"]) for s in shared]
    for mine, theirs in zip(scored, shared, strict=True):
        assert mine == {"id": str(theirs["id"]), "init": theirs["init"], "inputs": theirs["inputs"]}


@pytest.mark.parametrize("op", OPS)
def test_shapes_file_has_one_trailing_smoke_shape_of_the_same_form(op: str) -> None:
    data = json.loads((PROBLEMS / op / "shapes.json").read_text())
    assert data["op"] == op
    *scored, smoke = data["shapes"]
    assert smoke == {"id": "smoke", "smoke": True, "init": smoke["init"], "inputs": smoke["inputs"]}
    assert not any(s.get("smoke") for s in scored)
    assert {s["id"] for s in scored}.isdisjoint({"smoke"})
    assert all(s["init"].keys() == smoke["init"].keys() and s["inputs"].keys() == smoke["inputs"].keys() for s in scored)


# ---------------------------------------------------------------- generator and contract


@pytest.mark.parametrize("op", OPS)
def test_input_keys_are_forward_parameters(op: str) -> None:
    shape = _smoke(op)
    params = list(inspect.signature(_model(op, shape.init).forward).parameters)
    assert list(_inputs(op, 0, **shape.inputs)) == params


@pytest.mark.parametrize("op", OPS)
def test_inputs_are_seeded_locally(op: str) -> None:
    shape = _smoke(op)
    rng_before = torch.random.get_rng_state()
    first, again, other = (_inputs(op, seed, **shape.inputs) for seed in (11, 11, 12))
    assert torch.equal(rng_before, torch.random.get_rng_state()), "make_inputs touched the global RNG"
    for name in first:
        assert _same_bits(first[name], again[name]), name
        assert not _same_bits(first[name], other[name]), name


@pytest.mark.parametrize("op", OPS)
def test_reference_output_contract_at_smoke_shape(op: str) -> None:
    shape = _smoke(op)
    container, expected = CONTRACTS[op]
    model = _model(op, shape.init)
    assert not list(model.parameters()) and not list(model.buffers())
    inputs = _inputs(op, 3, **shape.inputs)
    assert sum(t.numel() for t in inputs.values()) <= 1 << 20, "smoke shape too large for a quick CPU run"
    assert next(iter(inputs.values())).shape[0] > 1, "smoke shape should have more than one row"
    pristine = {k: v.clone() for k, v in inputs.items()}
    out = model(**inputs)
    for name, tensor in inputs.items():
        assert _same_bits(tensor, pristine[name]), f"input {name} was modified"

    entries = _entries(out, container)
    assert [k for k, _ in entries] == [k for k, _, _ in expected(shape)]
    for (key, tensor), (_, want_shape, want_dtype) in zip(entries, expected(shape), strict=True):
        assert tensor.dtype == want_dtype, key
        assert tuple(tensor.shape) == want_shape, key
        assert torch.isfinite(tensor.float()).all(), key

    again = _entries(model(**_inputs(op, 3, **shape.inputs)), container)
    other = _entries(model(**_inputs(op, 4, **shape.inputs)), container)
    assert all(_same_bits(a, b) for (_, a), (_, b) in zip(entries, again, strict=True))
    assert not _same_bits(entries[0][1], other[0][1])


# ---------------------------------------------------------------- independent math

BF16_HALF_ULP = 2.0**-8  # relative bound of one correct rounding to bf16
SLACK = 1.0 + 1e-3  # fp32 evaluation error may push a value just past a bf16 midpoint
FP32_NOISE = 1e-6  # absolute fp32 evaluation error near a cancellation (layer_norm's + bias)


def _f64(t: torch.Tensor) -> np.ndarray:
    return t.double().numpy()


def _round_bf16(a: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 with round-to-nearest-even, by bit arithmetic (returned as fp32)."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def _from_np(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(dtype)


def _assert_one_rounding(actual: torch.Tensor, exact: np.ndarray) -> None:
    """`actual` is `exact` rounded once to bf16 (up to fp32 noise at a midpoint)."""
    err = np.abs(_f64(actual) - exact)
    assert (err <= BF16_HALF_ULP * SLACK * np.abs(exact) + FP32_NOISE).all(), err.max()


def _assert_mostly_exact(actual: torch.Tensor, expected: np.ndarray, ulp_rel: float) -> None:
    """Equal to an explicitly-rounded pipeline; a rare one-ulp flip where fp32 and float64
    intermediates land on opposite sides of a midpoint is allowed."""
    got = _f64(actual)
    mismatch = got != expected
    assert mismatch.mean() < 0.01
    assert (np.abs(got - expected)[mismatch] <= 2 * ulp_rel * np.abs(expected[mismatch])).all()


def test_rms_norm_matches_float64_formula() -> None:
    inp = _inputs("rms_norm", 5, token_count=5, hidden_size=72)
    out = _model("rms_norm", {"eps": 1e-6})(**inp)
    x, w = _f64(inp["x"]), _f64(inp["weight"])
    exact = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * w
    _assert_one_rounding(out, exact)


def test_silu_and_mul_rounds_silu_before_the_product() -> None:
    x = _inputs("silu_and_mul", 6, shape=[9, 2 * 40])["x"]
    out = _model("silu_and_mul", {})(x=x)
    a, b = _f64(x[:, :40]), _f64(x[:, 40:])
    silu = a / (1.0 + np.exp(-a))
    double = _round_bf16(_round_bf16(silu) * b)
    single = _round_bf16(silu * b)
    _assert_mostly_exact(out, double.astype(np.float64), 2.0**-8)
    assert (_f64(out) != single).sum() > 0, "no element shows the intermediate bf16 rounding"


def test_fused_add_rms_norm_normalises_the_rounded_sum() -> None:
    inp = _inputs("fused_add_rms_norm", 7, token_count=6, hidden_size=40)
    out = _model("fused_add_rms_norm", {"eps": 1e-6})(**inp)
    summed = _round_bf16(inp["x"].float().numpy() + inp["residual"].float().numpy())
    assert np.array_equal(out["residual"].float().numpy(), summed)
    s, w = summed.astype(np.float64), _f64(inp["weight"])
    _assert_one_rounding(out["out"], s / np.sqrt((s**2).mean(-1, keepdims=True) + 1e-6) * w)


def test_fused_qk_rmsnorm_rounds_twice_and_copies_v() -> None:
    init = {"head_num": 3, "kv_head_num": 1, "size_per_head": 128, "eps": 1e-6}
    inp = _inputs("fused_qk_rmsnorm", 8, num_tokens=2, head_num=3, kv_head_num=1, size_per_head=128, dtype="fp16")
    out = _model("fused_qk_rmsnorm", init)(**inp)
    hs = _f64(inp["hidden_states"]).reshape(2, 5, 128)
    weights = [_f64(inp["q_weight"])] * 3 + [_f64(inp["k_weight"])]
    double, single = np.empty((2, 4, 128)), np.empty((2, 4, 128))
    for head, w in enumerate(weights):
        h = hs[:, head]
        normed = h / np.sqrt((h**2).mean(-1, keepdims=True) + 1e-6)
        double[:, head] = (w * normed.astype(np.float16).astype(np.float64)).astype(np.float16)
        single[:, head] = (w * normed).astype(np.float16)
    _assert_mostly_exact(out[:, : 4 * 128], double.reshape(2, -1), 2.0**-11)
    assert (_f64(out[:, : 4 * 128]) != single.reshape(2, -1)).sum() > 0, "no element shows the intermediate fp16 rounding"
    assert _same_bits(out[:, 4 * 128 :], inp["hidden_states"][:, 4 * 128 :])


@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("activation", ["silu", "swish", "sigmoid"])
def test_gated_rms_norm_matches_float64_formula(norm_before_gate: bool, activation: str) -> None:
    inp = _inputs("gated_rms_norm", 9, rows=7, hidden_size=128)
    init = {"eps": 1e-6, "norm_before_gate": norm_before_gate, "activation": activation}
    out = _model("gated_rms_norm", init)(**inp)
    x, w, z = _f64(inp["x"]), _f64(inp["weight"]), _f64(inp["z"])
    sigmoid = 1.0 / (1.0 + np.exp(-z))
    gate = sigmoid if activation == "sigmoid" else z * sigmoid
    g = x if norm_before_gate else x * gate
    y = g / np.sqrt((g**2).mean(-1, keepdims=True) + 1e-6) * w
    _assert_one_rounding(out, y * gate if norm_before_gate else y)


def test_gated_rms_norm_rejects_unknown_activation() -> None:
    with pytest.raises(ValueError, match="activation"):
        _model("gated_rms_norm", {"activation": "gelu"})


def test_l2_norm_known_values_and_float64_formula() -> None:
    model = _model("l2_norm", {"hidden_size": 2, "eps": 1e-6})
    # 3-4-5 triangle: 0.6 and 0.8 round to 0.6015625 and 0.80078125 in bf16
    assert model(x=torch.tensor([[3.0, -4.0]], dtype=BF16)).tolist() == [[0.6015625, -0.80078125]]
    x = _inputs("l2_norm", 10, num_tokens=4, hidden_size=96, dtype="bfloat16")["x"]
    xd = _f64(x)
    _assert_one_rounding(model(x=x), xd / np.sqrt((xd**2).sum(-1, keepdims=True) + 1e-6))


@pytest.mark.parametrize("shape", [[4, 1, 48], [3, 80]])
def test_layer_norm_matches_float64_formula(shape: list[int]) -> None:
    inp = _inputs("layer_norm", 11, shape=shape)
    out = _model("layer_norm", {})(**inp)
    x, w, b = _f64(inp["x"]), _f64(inp["weight"]), _f64(inp["bias"])
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    _assert_one_rounding(out, (x - mu) / np.sqrt(var + 1e-5) * w + b)


# ---------------------------------------------------------------- fp8 e4m3fn codes, computed without torch's cast

FP8_MAX = 448.0  # the e4m3fn maximum


def _e4m3fn_values() -> np.ndarray:
    """The value of each of the 256 e4m3fn codes (NaN for the NaN codes), decoded from the bit
    layout: sign, 4 exponent bits with bias 7 (subnormals at exponent 0), 3 mantissa bits; NaN
    at 0x7F and 0xFF, no infinities, and a -0 at 0x80."""
    codes = np.arange(256)
    exponent, mantissa = (codes >> 3) & 0xF, codes & 0x7
    magnitude = np.where(exponent == 0, mantissa / 8 * 2.0**-6, (1 + mantissa / 8) * 2.0 ** (exponent.astype(float) - 7))
    values = np.where(codes & 0x80, -magnitude, magnitude)
    values[[0x7F, 0xFF]] = np.nan
    return values


def _e4m3fn_codes(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even e4m3fn codes of finite in-range values: nearest value, ties to the
    even mantissa, zero keeps the sign of x."""
    values = _e4m3fn_values()
    flat = np.asarray(x, np.float64).reshape(-1, 1)
    dist = np.abs(flat - values)
    dist[:, np.isnan(values)] = np.inf
    nearest = dist == dist.min(axis=1, keepdims=True)
    codes = np.arange(256)
    penalty = 2 * (codes & 1) + (np.signbit(values) != np.signbit(flat))
    return np.argmin(np.where(nearest, penalty, 99), axis=1).astype(np.uint8).reshape(np.shape(x))


def _codes(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.uint8).numpy()


# bf16 pairs (row/group maximum m, element x) whose fp32 quotients x/scale and x*(1/scale), with
# scale = m/448, get different e4m3fn codes (found by exhaustive search over bf16). In each pair
# one form is an exact rounding tie (5.25, to even -> 5.0) and the other lands one fp32 step past
# it (-> 5.5), so a quantiser that swaps division and reciprocal changes a code either way.
SPLITS = {
    "division_tie": (1.078125, 0.01263427734375),  # x/scale = 5.25, x*(1/scale) = 5.2500005
    "reciprocal_tie": (1.9375, 0.022705078125),  # x*(1/scale) = 5.25, x/scale = 5.2500005
}


def _bf16_rows(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64).to(BF16)


def test_e4m3fn_code_table_agrees_with_torch() -> None:
    values = _e4m3fn_values()
    finite = np.flatnonzero(~np.isnan(values))
    decoded = torch.from_numpy(finite.astype(np.uint8)).view(FN).double().numpy()
    assert np.array_equal(decoded, values[finite])
    assert np.array_equal(_e4m3fn_codes(values[finite]), finite.astype(np.uint8))
    # every rounding tie (midpoint of two neighbouring values, exact in fp32) goes to the even code
    grid = np.unique(values[finite])
    midpoints = np.float32((grid[1:] + grid[:-1]) / 2)
    cast = _codes(torch.from_numpy(midpoints).to(FN))
    assert np.array_equal(_e4m3fn_codes(midpoints), cast)
    assert not (cast & 1).any()


@pytest.mark.parametrize("split", SPLITS)
def test_fp8_dynamic_per_token_quant_codes_use_the_reciprocal(split: str) -> None:
    m, x = SPLITS[split]
    random_rows = _inputs("fp8_dynamic_per_token_quant", 12, token_count=4, hidden_size=64)["x"]
    special = _bf16_rows([[m, x, -m / 2] + [0.0] * 61, [0.0] * 64])  # split row; all-zero row
    inp = torch.cat([random_rows, special])
    q, scale = _model("fp8_dynamic_per_token_quant", {})(x=inp)

    xf = inp.float().numpy()
    want_scale = np.maximum(np.abs(xf).max(-1), np.float32(1e-12)) / np.float32(FP8_MAX)
    assert np.array_equal(scale.numpy(), want_scale)
    inv = np.float32(1.0) / want_scale
    want = _e4m3fn_codes(np.clip(xf * inv[:, None], -FP8_MAX, FP8_MAX))
    assert np.array_equal(_codes(q), want)
    divided = _e4m3fn_codes(np.float32(x) / want_scale[4])
    assert _codes(q)[4, 1] != divided, "the split pair no longer separates reciprocal from division"
    assert not _codes(q)[5].any()


@pytest.mark.parametrize("split", SPLITS)
def test_per_token_group_quant_fp8_codes_use_division(split: str) -> None:
    m, x = SPLITS[split]
    inp = _inputs("per_token_group_quant_fp8", 13, token_count=3, hidden_size=3 * 32)["x"]
    inp[1, 32:64] = _bf16_rows([[-m, x] + [0.0] * 30])  # split group (negative maximum)
    inp[2, 64:96] = 0.0  # all-zero group
    out = _model("per_token_group_quant_fp8", {"group_size": 32})(x=inp)

    groups = inp.float().numpy().reshape(3, 3, 32)
    want_scales = np.maximum(np.abs(groups).max(-1) / np.float32(FP8_MAX), np.float32(1e-10))
    assert np.array_equal(out["scales"].numpy(), want_scales)
    want = _e4m3fn_codes(np.clip(groups / want_scales[..., None], -FP8_MAX, FP8_MAX)).reshape(3, 96)
    assert np.array_equal(_codes(out["quantized"]), want)
    by_reciprocal = _e4m3fn_codes(np.float32(x) * (np.float32(1.0) / want_scales[1, 1]))
    assert _codes(out["quantized"])[1, 33] != by_reciprocal, "the split pair no longer separates division from reciprocal"
    assert out["scales"][2, 2].item() == np.float32(1e-10) and not _codes(out["quantized"])[2, 64:].any()


@pytest.mark.parametrize("split", SPLITS)
def test_fused_rmsnorm_quant_matches_fp32_pipeline(split: str) -> None:
    hidden, eps = 64, 1e-5  # H a power of two, inputs on a 1/8 grid: mean(u^2) is exact in fp32
    gen = torch.Generator().manual_seed(14)
    x = (torch.randint(-16, 17, (4, hidden), generator=gen) / 8).to(BF16)
    residual = (torch.randint(-16, 17, (4, hidden), generator=gen) / 8).to(BF16)
    weight = _inputs("fused_rmsnorm_quant", 14, token_count=1, hidden_size=hidden)["weight"]
    m, small = SPLITS[split]
    x[2], residual[2] = 1.0, 0.0  # u = 1 everywhere: normed = weight up to rounding
    weight = torch.cat([_bf16_rows([[m, small]])[0], weight[2:].clamp(-1, 1)])  # row 2's maximum is m
    x[3] = -residual[3]  # zero row: scale 0 becomes 1
    quantized, scale, residual_out = _model("fused_rmsnorm_quant", {"eps": eps})(x=x, residual=residual, weight=weight)

    r = _round_bf16(x.float().numpy() + residual.float().numpy())
    assert np.array_equal(residual_out.float().numpy(), r)
    inv_rms = np.float32(1.0) / np.sqrt((r * r).sum(-1, keepdims=True) / np.float32(hidden) + np.float32(eps))
    normed = _round_bf16(r * inv_rms * weight.float().numpy())
    want_scale = np.abs(normed).max(-1, keepdims=True) / np.float32(FP8_MAX)
    want_scale[want_scale == 0] = 1.0
    assert np.array_equal(scale.numpy(), want_scale)
    assert np.array_equal(_codes(quantized), _e4m3fn_codes(normed / want_scale))
    assert normed[2, 0] == np.float32(m) and normed[2, 1] == np.float32(small)
    by_reciprocal = _e4m3fn_codes(np.float32(small) * (np.float32(1.0) / want_scale[2, 0]))
    assert _codes(quantized)[2, 1] != by_reciprocal, "the split pair no longer separates division from reciprocal"
    # the zero row's codes are zeros; e4m3fn keeps the sign, so a negative weight gives -0 (0x80)
    assert scale[3].item() == 1.0 and not (_codes(quantized)[3] & 0x7F).any()
    assert (_codes(quantized)[3] == 0x80).any()
