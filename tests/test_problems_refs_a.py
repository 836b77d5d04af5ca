"""Problem references, batch A (norms, SwiGLU, fp8 quantisers): each reference agrees with an
independent float64 / numpy-fp32 computation on tiny hand-built inputs, including the
intermediate roundings and the fp8 scale arithmetic (division vs reciprocal) the SPEC fixes.
The contract every problem folder keeps is tested in tests/test_problems_contract.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from problem_contract import BF16, FN, assert_one_rounding, f64, make_inputs, model, same_bits

# ---------------------------------------------------------------- norms and SwiGLU against float64

FP32_NOISE = 1e-6  # absolute fp32 evaluation error near a cancellation (layer_norm's + bias)


def _round_bf16(a: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 with round-to-nearest-even, by bit arithmetic (returned as fp32)."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def _assert_mostly_exact(actual: torch.Tensor, expected: np.ndarray, ulp_rel: float) -> None:
    """Equal to an explicitly-rounded pipeline; a rare one-ulp flip where fp32 and float64
    intermediates land on opposite sides of a midpoint is allowed."""
    got = f64(actual)
    mismatch = got != expected
    assert mismatch.mean() < 0.01
    assert (np.abs(got - expected)[mismatch] <= 2 * ulp_rel * np.abs(expected[mismatch])).all()


def test_rms_norm_matches_float64_formula() -> None:
    inp = make_inputs("rms_norm", 5, token_count=5, hidden_size=72)
    out = model("rms_norm", {"eps": 1e-6})(**inp)
    x, w = f64(inp["x"]), f64(inp["weight"])
    exact = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * w
    assert_one_rounding(out, exact, noise=FP32_NOISE)


def test_silu_and_mul_rounds_silu_before_the_product() -> None:
    x = make_inputs("silu_and_mul", 6, shape=[9, 2 * 40])["x"]
    out = model("silu_and_mul", {})(x=x)
    a, b = f64(x[:, :40]), f64(x[:, 40:])
    silu = a / (1.0 + np.exp(-a))
    double = _round_bf16(_round_bf16(silu) * b)
    single = _round_bf16(silu * b)
    _assert_mostly_exact(out, double.astype(np.float64), 2.0**-8)
    assert (f64(out) != single).sum() > 0, "no element shows the intermediate bf16 rounding"


def test_fused_add_rms_norm_normalises_the_rounded_sum() -> None:
    inp = make_inputs("fused_add_rms_norm", 7, token_count=6, hidden_size=40)
    out = model("fused_add_rms_norm", {"eps": 1e-6})(**inp)
    summed = _round_bf16(inp["x"].float().numpy() + inp["residual"].float().numpy())
    assert np.array_equal(out["residual"].float().numpy(), summed)
    s, w = summed.astype(np.float64), f64(inp["weight"])
    assert_one_rounding(out["out"], s / np.sqrt((s**2).mean(-1, keepdims=True) + 1e-6) * w, noise=FP32_NOISE)


def test_fused_qk_rmsnorm_rounds_twice_and_copies_v() -> None:
    init = {"head_num": 3, "kv_head_num": 1, "size_per_head": 128, "eps": 1e-6}
    inp = make_inputs("fused_qk_rmsnorm", 8, num_tokens=2, head_num=3, kv_head_num=1, size_per_head=128, dtype="fp16")
    out = model("fused_qk_rmsnorm", init)(**inp)
    hs = f64(inp["hidden_states"]).reshape(2, 5, 128)
    weights = [f64(inp["q_weight"])] * 3 + [f64(inp["k_weight"])]
    double, single = np.empty((2, 4, 128)), np.empty((2, 4, 128))
    for head, w in enumerate(weights):
        h = hs[:, head]
        normed = h / np.sqrt((h**2).mean(-1, keepdims=True) + 1e-6)
        double[:, head] = (w * normed.astype(np.float16).astype(np.float64)).astype(np.float16)
        single[:, head] = (w * normed).astype(np.float16)
    _assert_mostly_exact(out[:, : 4 * 128], double.reshape(2, -1), 2.0**-11)
    assert (f64(out[:, : 4 * 128]) != single.reshape(2, -1)).sum() > 0, (
        "no element shows the intermediate fp16 rounding"
    )
    assert same_bits(out[:, 4 * 128 :], inp["hidden_states"][:, 4 * 128 :])


@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("activation", ["silu", "swish", "sigmoid"])
def test_gated_rms_norm_matches_float64_formula(norm_before_gate: bool, activation: str) -> None:
    inp = make_inputs("gated_rms_norm", 9, rows=7, hidden_size=128)
    init = {"eps": 1e-6, "norm_before_gate": norm_before_gate, "activation": activation}
    out = model("gated_rms_norm", init)(**inp)
    x, w, z = f64(inp["x"]), f64(inp["weight"]), f64(inp["z"])
    sigmoid = 1.0 / (1.0 + np.exp(-z))
    gate = sigmoid if activation == "sigmoid" else z * sigmoid
    g = x if norm_before_gate else x * gate
    y = g / np.sqrt((g**2).mean(-1, keepdims=True) + 1e-6) * w
    assert_one_rounding(out, y * gate if norm_before_gate else y, noise=FP32_NOISE)


def test_gated_rms_norm_rejects_unknown_activation() -> None:
    with pytest.raises(ValueError, match="activation"):
        model("gated_rms_norm", {"activation": "gelu"})


def test_l2_norm_known_values_and_float64_formula() -> None:
    norm = model("l2_norm", {"hidden_size": 2, "eps": 1e-6})
    # 3-4-5 triangle: 0.6 and 0.8 round to 0.6015625 and 0.80078125 in bf16
    assert norm(x=torch.tensor([[3.0, -4.0]], dtype=BF16)).tolist() == [[0.6015625, -0.80078125]]
    x = make_inputs("l2_norm", 10, num_tokens=4, hidden_size=96, dtype="bfloat16")["x"]
    xd = f64(x)
    assert_one_rounding(norm(x=x), xd / np.sqrt((xd**2).sum(-1, keepdims=True) + 1e-6), noise=FP32_NOISE)


@pytest.mark.parametrize("shape", [[4, 1, 48], [3, 80]])
def test_layer_norm_matches_float64_formula(shape: list[int]) -> None:
    inp = make_inputs("layer_norm", 11, shape=shape)
    out = model("layer_norm", {})(**inp)
    x, w, b = f64(inp["x"]), f64(inp["weight"]), f64(inp["bias"])
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    assert_one_rounding(out, (x - mu) / np.sqrt(var + 1e-5) * w + b, noise=FP32_NOISE)


# ---------------------------------------------------------------- fp8 e4m3fn codes, computed without torch's cast

FP8_MAX = 448.0  # the e4m3fn maximum


def _e4m3fn_values() -> np.ndarray:
    """The value of each of the 256 e4m3fn codes (NaN for the NaN codes), decoded from the bit
    layout: sign, 4 exponent bits with bias 7 (subnormals at exponent 0), 3 mantissa bits; NaN
    at 0x7F and 0xFF, no infinities, and a -0 at 0x80."""
    codes = np.arange(256)
    exponent, mantissa = (codes >> 3) & 0xF, codes & 0x7
    magnitude = np.where(
        exponent == 0, mantissa / 8 * 2.0**-6, (1 + mantissa / 8) * 2.0 ** (exponent.astype(float) - 7)
    )
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
    random_rows = make_inputs("fp8_dynamic_per_token_quant", 12, token_count=4, hidden_size=64)["x"]
    special = _bf16_rows([[m, x, -m / 2] + [0.0] * 61, [0.0] * 64])  # split row; all-zero row
    inp = torch.cat([random_rows, special])
    q, scale = model("fp8_dynamic_per_token_quant", {})(x=inp)

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
    inp = make_inputs("per_token_group_quant_fp8", 13, token_count=3, hidden_size=3 * 32)["x"]
    inp[1, 32:64] = _bf16_rows([[-m, x] + [0.0] * 30])  # split group (negative maximum)
    inp[2, 64:96] = 0.0  # all-zero group
    out = model("per_token_group_quant_fp8", {"group_size": 32})(x=inp)

    groups = inp.float().numpy().reshape(3, 3, 32)
    want_scales = np.maximum(np.abs(groups).max(-1) / np.float32(FP8_MAX), np.float32(1e-10))
    assert np.array_equal(out["scales"].numpy(), want_scales)
    want = _e4m3fn_codes(np.clip(groups / want_scales[..., None], -FP8_MAX, FP8_MAX)).reshape(3, 96)
    assert np.array_equal(_codes(out["quantized"]), want)
    by_reciprocal = _e4m3fn_codes(np.float32(x) * (np.float32(1.0) / want_scales[1, 1]))
    assert _codes(out["quantized"])[1, 33] != by_reciprocal, (
        "the split pair no longer separates division from reciprocal"
    )
    assert out["scales"][2, 2].item() == np.float32(1e-10) and not _codes(out["quantized"])[2, 64:].any()


@pytest.mark.parametrize("split", SPLITS)
def test_fused_rmsnorm_quant_matches_fp32_pipeline(split: str) -> None:
    hidden, eps = 64, 1e-5  # H a power of two, inputs on a 1/8 grid: mean(u^2) is exact in fp32
    gen = torch.Generator().manual_seed(14)
    x = (torch.randint(-16, 17, (4, hidden), generator=gen) / 8).to(BF16)
    residual = (torch.randint(-16, 17, (4, hidden), generator=gen) / 8).to(BF16)
    weight = make_inputs("fused_rmsnorm_quant", 14, token_count=1, hidden_size=hidden)["weight"]
    m, small = SPLITS[split]
    x[2], residual[2] = 1.0, 0.0  # u = 1 everywhere: normed = weight up to rounding
    weight = torch.cat([_bf16_rows([[m, small]])[0], weight[2:].clamp(-1, 1)])  # row 2's maximum is m
    x[3] = -residual[3]  # zero row: scale 0 becomes 1
    quantized, scale, residual_out = model("fused_rmsnorm_quant", {"eps": eps})(x=x, residual=residual, weight=weight)

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
