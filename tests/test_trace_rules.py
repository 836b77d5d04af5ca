"""The rules table: coverage of the 30 operators, agreement with the references' signatures, every
operator's shape read back from a real profiler record, kernel-name and predicate matching, the
bucket schemes, and the expression language's limits."""

from __future__ import annotations

import json

import pytest

from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.trace import TraceSpec, expr, import_traces
from atrex_mcp.trace.reference_ops import NAMESPACE, schema_arguments
from atrex_mcp.trace.rules import DEFAULT_RULES, Rules, TokenBuckets
from atrex_mcp.trace.synthetic import OpCall, Step, record_trace


@pytest.fixture(scope="module")
def rules():
    return Rules.load()


def test_rules_cover_exactly_the_shipped_operators(rules):
    benchmark = sorted(op for op, rule in rules.data.operators.items() if rule.benchmark)
    assert benchmark == Catalog().names()
    # Recognised so that their time is named, though the benchmark has no problem for them.
    assert sorted(set(rules.operators) - set(benchmark)) == ["gelu_and_mul"]


def test_every_name_says_which_stack_and_version_it_comes_from(rules):
    stacks = rules.data.stacks
    assert {"pytorch", "huggingface", "vllm", "sglang", "flashinfer", "aiter", "inductor"} <= set(stacks)
    sources = [h for r in rules.data.operators.values() for h in r.host_ops] + list(rules.data.patterns)
    assert all(s.stack in stacks for s in sources)
    assert rules.data.generated.stack in stacks
    assert all(any(c.isdigit() for c in note) for name, note in stacks.items() if name != "atrex")  # versions


def test_atrex_rules_follow_the_reference_signatures(rules):
    catalog = Catalog()
    for op, rule in rules.data.operators.items():
        if not rule.benchmark:
            continue
        named = [h for h in rule.host_ops if h.name == f"{NAMESPACE}::{op}"]
        assert len(named) == 1, op
        forward, init = schema_arguments(catalog.load_reference(op))
        assert named[0].args == forward + init, op


# Sequence lengths travel as tensor values, which the profiler does not record: the snapshot
# splits the tokens evenly, and paged attention's context is read from the block table.
LOSSY = {"attention_forward": {"seq_lens"}, "unified_attention": {"seq_lens"}, "paged_attention_decode": {"ctx_len"}}


@pytest.mark.slow
def test_every_operator_shape_is_read_back_from_a_profiler_record(tmp_path):
    """Each reference runs as atrex::<op> at its smoke shape; with exact buckets the imported shape
    is the smoke shape again, except for values the profiler cannot see."""
    catalog = Catalog()
    smoke = {op: catalog.visible(op).smoke_shape for op in catalog.names()}
    trace = record_trace(
        [Step("prefill", [OpCall(op, dict(s.inputs), dict(s.init)) for op, s in smoke.items()])],
        tmp_path / "all.json",
        warmup=0,
    )
    table = json.loads(DEFAULT_RULES.read_text())
    table["token_buckets"] = {"kind": "exact"}
    (tmp_path / "rules.json").write_text(json.dumps(table))
    manifest = import_traces([TraceSpec("a", trace)], tmp_path / "snap", rules_path=tmp_path / "rules.json")
    assert manifest.unmapped_share == 0
    snap = Catalog(tmp_path / "snap")
    assert snap.names() == catalog.names()
    for op, expected in smoke.items():
        (shape,) = snap.visible(op).scored_shapes
        assert shape.init == expected.init, op
        same = {k: v for k, v in shape.inputs.items() if k not in LOSSY.get(op, set())}
        assert same == {k: v for k, v in expected.inputs.items() if k in same}, op
        assert set(shape.inputs) == set(expected.inputs), op
    assert snap.visible("paged_attention_decode").scored_shapes[0].inputs["ctx_len"] == 48  # 3 blocks of 16
    assert snap.visible("attention_forward").scored_shapes[0].inputs["seq_lens"] == [20, 19, 19]  # 58 tokens


@pytest.mark.parametrize(
    "kernel, op",
    [
        ("void vllm::rms_norm_kernel<c10::BFloat16, 8, 3>(c10::BFloat16*, ...)", "rms_norm"),
        ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(...)", "fused_add_rms_norm"),
        ("void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, true>(...)", "silu_and_mul"),
        ("void vllm::paged_attention_v2_kernel<...>", "paged_attention_decode"),
        ("fused_moe_kernel", "fused_moe"),
        ("kernel_unified_attention_3d", "unified_attention"),
        ("triton_red_fused_add_mean_mul_pow_rsqrt_0", None),
        ("sm90_xmma_gemm_bf16bf16_bf16f32", None),
    ],
)
def test_kernel_names(rules, kernel, op):
    assert rules.match_kernel(kernel) == op


def test_host_predicates(rules):
    def args(x, weight):
        return {
            "Input Dims": [x, [len(x) - 1], weight, weight, []],
            "Input type": ["c10::BFloat16", "ScalarList", "c10::BFloat16", "c10::BFloat16", "Scalar"],
            "Concrete Inputs": ["", str([x[-1]]), "", "", "1e-05"],
        }

    match = rules.match_host("aten::layer_norm", args([10, 1, 1152], [1152]))
    assert match is not None and match.op == "layer_norm"
    assert rules.match_host("aten::layer_norm", args([1152], [1152])) is None  # a single row: not a token batch
    assert rules.match_host("aten::native_layer_norm", args([7, 64], [64])).op == "layer_norm"
    assert rules.match_host("aten::mm", {}) is None
    assert rules.match_range("atrex::rms_norm") == "rms_norm"
    assert rules.phase_of_range("prefill") == "prefill" and rules.phase_of_range("decode_step#3") == "decode"
    assert rules.phase_of_range("ProfilerStep#3") is None and rules.phase_of_range("decoder_layer") is None


def test_bucket_schemes():
    pow2 = TokenBuckets(kind="pow2")
    assert [pow2.bucket(n) for n in (0, 1, 2, 3, 50, 64, 65, 100_000)] == [0, 1, 2, 4, 64, 64, 128, 131072]
    listed = TokenBuckets(kind="list", bounds=[8, 48, 512])
    assert [listed.bucket(n) for n in (3, 9, 48, 49, 600)] == [8, 48, 48, 512, 1024]
    assert TokenBuckets(kind="exact").bucket(37) == 37
    with pytest.raises(ValueError):
        TokenBuckets(kind="list", bounds=[8, 8])
    with pytest.raises(expr.ExprError):
        pow2.bucket(2.5)


def test_expressions():
    names = {"x": [4, 5, 6], "eps": 1e-6}
    assert expr.evaluate("prod(x[:-1]) * 2", names) == 40
    assert expr.evaluate("[x[0], 1, x[-1]]", names) == [4, 1, 6]
    assert expr.evaluate("split(10, 3)", names) == [4, 3, 3]
    assert expr.evaluate("x[0] if len(x) == 3 and eps < 1 else 0", names) == 4
    with pytest.raises(expr.UnboundName) as err:
        expr.evaluate("y[0]", names)
    assert err.value.name == "y"
    with pytest.raises(expr.ExprError, match="IndexError"):
        expr.evaluate("x[5]", names)
    for hostile in (
        "x.__class__",
        "__import__('os')",
        "[a for a in x]",
        "(lambda: 1)()",
        "open('f')",
        "max(x, key=len)",
    ):
        with pytest.raises(expr.ExprError):
            expr.evaluate(hostile, names)


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (lambda t: t["operators"]["rms_norm"]["host_ops"].append({"name": "(unclosed"}), "rms_norm"),
        (lambda t: t["operators"]["rms_norm"].update(tokens="x.shape"), "Attribute"),
        (lambda t: t.pop("version"), "version"),
        (lambda t: t.update(token_buckets={"kind": "log"}), "token_buckets"),
    ],
)
def test_malformed_rules_are_refused(tmp_path, edit, fragment):
    table = json.loads(DEFAULT_RULES.read_text())
    edit(table)
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(table))
    with pytest.raises(AtrexError) as err:
        Rules.load(path)
    assert err.value.info.category == "bad_rules" and fragment in err.value.info.message
