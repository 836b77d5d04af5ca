"""GPU-side naming, on a hand-built Kineto trace with known times: Inductor's Triton kernels (host
launch events carrying the kernel name and its recorded arguments, and device kernels with no host
operator, as under CUDA graphs), a kernel fusing two operators, and what unmapped time is: a
cuBLAS-style GEMM, an NCCL all-reduce, a memcpy and an elementwise aten op."""

from __future__ import annotations

import pytest

from atrex_mcp.trace import TraceSpec, build_snapshot
from atrex_mcp.trace.rules import Rules
from tests.trace_fixtures import BF16, KinetoBuilder, mm_args


def triton_args(tokens: int, hidden: int) -> list[tuple[list[int], str, str]]:
    """A fused RMSNorm launch as Inductor records it: x, weight, out, then xnumel and r0_numel."""
    return [
        ([tokens, hidden], BF16, ""),
        ([hidden], BF16, ""),
        ([tokens, hidden], BF16, ""),
        ([], "Scalar", str(tokens)),
        ([], "Scalar", str(hidden)),
    ]


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    b = KinetoBuilder()
    b.range("prefill", 0, 1000)
    b.kernel(
        "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",
        10,
        b.op("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", 10, 20, triton_args(64, 4096)),
    )
    b.kernel(
        "triton_per_fused_add_cat_mean_mul_neg_pow_rsqrt_1",
        20,
        b.op("triton_per_fused_add_cat_mean_mul_neg_pow_rsqrt_1", 40, 20, triton_args(64, 4096)),
    )
    b.kernel(
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
        40,
        b.op("aten::mm", 70, 20, mm_args(64, 4096, 4096)),
    )
    b.kernel(
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        20,
        b.op("c10d::allreduce_", 100, 20, []),
    )
    b.kernel("Memcpy HtoD (Pageable -> Device)", 5, b.op("aten::copy_", 130, 20, []), cat="gpu_memcpy")
    b.kernel("triton_poi_fused_mul_silu_2", 10, b.op("aten::mul", 160, 10, []), link="external_id")
    b.kernel(
        "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<c10::BFloat16>>",
        5,
        b.op("aten::add", 180, 10, []),
    )
    trace = b.write(tmp_path_factory.mktemp("gpu") / "triton.json")
    return build_snapshot([TraceSpec("chat", trace)]).manifest


def test_generated_kernels_are_attributed_by_the_ops_they_fuse(manifest):
    ops = manifest.operators
    assert set(ops) == {"rms_norm", "mrope", "silu_and_mul"}
    assert ops["rms_norm"].calls == 2
    assert sum(ops["rms_norm"].device_us.values()) == pytest.approx(20)  # 10, and half of the fused 20
    assert sum(ops["mrope"].device_us.values()) == pytest.approx(10)
    assert sum(ops["silu_and_mul"].device_us.values()) == pytest.approx(10)
    assert ops["silu_and_mul"].sources == {"triton_poi_fused_mul_silu": 1}
    assert manifest.inputs[0].links["generated_kernel_name"] == 1  # a device kernel no host operator claims
    (fused,) = manifest.fused_kernels
    assert (fused.kernel, fused.operators, fused.launches, fused.device_us) == (
        "triton_per_fused_add_cat_mean_mul_neg_pow_rsqrt",
        ["rms_norm", "mrope"],
        1,
        20,
    )


def test_shapes_from_a_triton_launch(manifest):
    rms = manifest.operators["rms_norm"]
    assert rms.retained and rms.unresolved_calls == 0
    (shape,) = rms.shapes.values()
    assert shape.count == 2 and shape.defaulted == ["eps"]  # Inductor bakes eps into the kernel
    assert manifest.operators["mrope"].unresolved_reasons == {
        "shape incomplete: no rule reads mrope's shape from a generated kernel's arguments": 1
    }
    assert manifest.operators["silu_and_mul"].unresolved_reasons == {
        "a generated kernel matched by its device name only: no recorded arguments": 1
    }


def test_unmapped_time_by_category(manifest):
    total = 110.0
    assert manifest.unmapped_share == pytest.approx(70 / total)
    shares = {k: c.share for k, c in manifest.unmapped_by_category.items()}
    assert shares == pytest.approx(
        {"gemm": 40 / total, "communication": 20 / total, "memory": 5 / total, "other_ops": 5 / total}
    )
    categories = manifest.unmapped_by_category
    assert list(categories["gemm"].top) == ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"]
    assert categories["communication"].label.startswith("communication")
    assert list(categories["other_ops"].top) == ["aten::add"]


@pytest.mark.parametrize(
    "name, ops",
    [
        ("triton_poi_fused_add_mul_silu_0", ("silu_and_mul",)),
        ("triton_poi_fused_gelu_mul_3", ("gelu_and_mul",)),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_12", ("rms_norm",)),
        ("triton_per_fused_native_layer_norm_0", ("layer_norm",)),
        ("triton_poi_fused_add_cat_mul_neg_slice_unsqueeze_4", ("mrope",)),
        ("triton_poi_fused_index_copy_5", ("reshape_and_cache",)),
        ("graph_0_cpp_fused__unsafe_view_mul_silu_2", ("silu_and_mul",)),
        ("triton_poi_fused_add_0", ()),  # a residual add: generated, but no benchmark operator
        ("triton_poi_fused_0", ()),
    ],
)
def test_generated_names(name, ops):
    match = Rules.load().match_generated(name)
    assert match is not None and match.ops == ops


def test_non_generated_names():
    rules = Rules.load()
    assert rules.match_generated("void vllm::rms_norm_kernel<c10::BFloat16>") is None
    assert rules.match_generated("aten::silu") is None
