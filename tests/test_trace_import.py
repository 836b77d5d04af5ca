"""Traces made here, on CPU, by running small transformer-style blocks built from the benchmark's
own references under torch.profiler, then imported: operators, phases, buckets, the snapshot as
a problem set, and the CLI."""

from __future__ import annotations

import json

import pytest
import torch

from atrex_mcp.cli import main
from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.trace import TraceSpec, build_snapshot, import_traces
from atrex_mcp.trace.synthetic import OpCall, Step, record_trace

HIDDEN = 128
BLOCK_OPS = {"rms_norm", "linear_sigmoid_mul", "silu_and_mul", "attention_forward", "fused_add_rms_norm"}


def block(tokens: int, seq_lens: list[int], form: str = "named") -> list:
    """rms_norm → (projection) → linear_sigmoid_mul → silu_and_mul → attention → fused_add_rms_norm."""
    weight = torch.randn(3 * HIDDEN, HIDDEN, dtype=torch.bfloat16)
    x = torch.randn(tokens, HIDDEN, dtype=torch.bfloat16)
    return [
        OpCall("rms_norm", {"token_count": tokens, "hidden_size": HIDDEN}, {"eps": 1e-6}, form),
        lambda: torch.nn.functional.linear(x, weight),  # a projection GEMM: no rule claims it
        OpCall("linear_sigmoid_mul", {"token_count": tokens, "hidden_size": HIDDEN, "out_features": 64}, form=form),
        OpCall("silu_and_mul", {"shape": [tokens, 128]}, form=form),
        OpCall("attention_forward", {"num_heads": 2, "head_dim": 32, "seq_lens": seq_lens}, form=form),
        OpCall("fused_add_rms_norm", {"token_count": tokens, "hidden_size": HIDDEN}, {"eps": 1e-6}, form),
    ]


def steps(phase_ranges: bool, form: str = "named") -> list[Step]:
    """Two prefill steps (50 and 60 tokens: one bucket) and two decode steps (3 and 4 sequences)."""

    def name(phase: str) -> str | None:
        return phase if phase_ranges else None

    return [
        Step(name("prefill"), block(50, [30, 20], form)),
        Step(name("prefill"), block(60, [35, 25], form)),
        Step(name("decode"), block(3, [1, 1, 1], form)),
        Step(name("decode"), block(4, [1, 1, 1, 1], form)),
    ]


@pytest.fixture(scope="module")
def annotated_trace(tmp_path_factory):
    return record_trace(steps(phase_ranges=True), tmp_path_factory.mktemp("trace") / "block.json")


@pytest.fixture(scope="module")
def snapshot(annotated_trace, tmp_path_factory):
    out = tmp_path_factory.mktemp("snap") / "v1"
    return out, import_traces([TraceSpec("chat", annotated_trace)], out)


def test_operators_found_and_other_time_reported(snapshot):
    out, manifest = snapshot
    assert manifest.device == "cpu"  # no kernels: operator self time
    assert set(manifest.operators) == BLOCK_OPS
    assert all(rec.retained and rec.unresolved_calls == 0 and rec.calls == 4 for rec in manifest.operators.values())
    assert 0 < manifest.unmapped_share < 1  # the projection GEMMs
    assert manifest.excluded_share == 0
    assert sorted(Catalog(out).names()) == sorted(BLOCK_OPS)


def test_phases_from_ranges_and_token_buckets(snapshot):
    out, manifest = snapshot
    assert set(manifest.device_us_by_app_phase["chat"]) == {"prefill", "decode"}
    catalog = Catalog(out)
    rms = manifest.operators["rms_norm"]
    by_tokens = {s.inputs["token_count"]: rms.shapes[s.id] for s in catalog.visible("rms_norm").scored_shapes}
    assert set(by_tokens) == {64, 4}  # 50 and 60 collapse into 64; 3 and 4 into 4
    assert (by_tokens[64].count, by_tokens[64].phases) == (2, ["prefill"])
    assert (by_tokens[4].count, by_tokens[4].phases) == (2, ["decode"])
    assert all(set(rec.device_us) == {"prefill", "decode"} for rec in manifest.operators.values())
    silu = {tuple(s.inputs["shape"]) for s in catalog.visible("silu_and_mul").scored_shapes}
    assert silu == {(64, 128), (4, 128)}
    attention = sorted(s.inputs["seq_lens"] for s in catalog.visible("attention_forward").scored_shapes)
    assert attention == [[1, 1, 1, 1], [32, 32]]  # 3 sequences of decode round up to 4


def test_snapshot_is_a_problem_set(snapshot):
    out, manifest = snapshot
    shipped, catalog = Catalog(), Catalog(out)
    for op in catalog.names():
        mine, theirs = catalog.visible(op), shipped.visible(op)
        assert mine.reference_source == theirs.reference_source
        assert mine.input_source == theirs.input_source
        assert mine.smoke_shape == theirs.smoke_shape
        assert [s.id for s in mine.scored_shapes] == list(manifest.operators[op].shapes)
        make_inputs = catalog.load_make_inputs(op)
        model = catalog.load_reference(op)
        for shape in mine.scored_shapes:  # every trace shape builds inputs the reference accepts
            model(**shape.init)(**make_inputs(seed=0, **shape.inputs))
    assert sum(catalog.weights().values()) == pytest.approx(1.0)
    for hidden in ("metadata.json", "roofline.json"):
        assert not any((out / op / hidden).exists() for op in catalog.names())
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["rules_version"] and doc["inputs"][0]["sha256"] and doc["created"]


def test_shape_ids_are_stable_across_imports(annotated_trace, snapshot, tmp_path):
    _out, manifest = snapshot
    again = import_traces([TraceSpec("chat", annotated_trace)], tmp_path / "again")
    assert {op: list(r.shapes) for op, r in again.operators.items()} == {
        op: list(r.shapes) for op, r in manifest.operators.items()
    }


def test_phase_from_token_counts_without_ranges(tmp_path):
    trace = record_trace(steps(phase_ranges=False), tmp_path / "plain.json")
    manifest = import_traces([TraceSpec("chat", trace)], tmp_path / "snap", decode_max_tokens=16)
    rms = manifest.operators["rms_norm"]
    assert sorted(rec.phases for rec in rms.shapes.values()) == [["decode"], ["prefill"]]
    # The unmapped projections take the phase of the calls around them.
    assert set(manifest.unmapped_by_app_phase["chat"]) == {"prefill", "decode"}


def test_ranges_and_anonymous_references(tmp_path):
    """record_function('atrex::<op>') names the operator but records no shapes; a bare reference is
    'other'. Neither leaves an operator to keep: the report is built, the import is refused."""
    ranged = record_trace([Step("prefill", block(40, [40], form="range"))], tmp_path / "ranged.json")
    content = build_snapshot([TraceSpec("chat", ranged)])
    manifest = content.manifest
    assert set(manifest.operators) == BLOCK_OPS
    assert all(
        not r.retained and r.unresolved_reasons == {"a range without a shape-bearing operator inside": 1}
        for r in manifest.operators.values()
    )
    assert manifest.excluded_share + manifest.unmapped_share == pytest.approx(
        1.0
    )  # one phase: all time is one or the other
    # How the time splits depends on CPU load while recording; both sides hold some of it.
    assert 0 < manifest.excluded_share < 1 and manifest.unmapped_share > 0
    assert set(content.files) == {"manifest.json", "weights.json"}
    with pytest.raises(AtrexError) as err:
        import_traces([TraceSpec("chat", ranged)], tmp_path / "ranged")
    assert (
        err.value.info.category == "no_operators" and "a range without a shape-bearing operator" in err.value.info.hint
    )
    assert not (tmp_path / "ranged").exists()

    # A bare reference is recognised only where its aten ops form a known pattern (silu then mul).
    bare = record_trace([Step("prefill", block(40, [40], form="anonymous"))], tmp_path / "bare.json")
    manifest = build_snapshot([TraceSpec("chat", bare)]).manifest
    assert list(manifest.operators) == ["silu_and_mul"]
    assert manifest.operators["silu_and_mul"].sources == {"pattern aten::silu+aten::mul": 1}
    assert 0.5 < manifest.unmapped_share < 1


def test_cli_import_and_json(annotated_trace, tmp_path, capsys):
    apps = tmp_path / "apps.yaml"
    apps.write_text("chat: 0.5\ncode: 0.5\n")
    out = tmp_path / "cli"
    rc = main(
        [
            "trace",
            "import",
            str(annotated_trace),
            f"code={annotated_trace}",
            "--app",
            "chat",
            "--apps",
            str(apps),
            "--out",
            str(out),
            "--json",
        ]
    )
    assert rc == 0
    manifest = json.loads(capsys.readouterr().out)
    assert [i["app"] for i in manifest["inputs"]] == ["chat", "code"]
    assert manifest["apps_file"]["path"] == str(apps)
    assert Catalog(out).names() == sorted(BLOCK_OPS)
    assert main(["trace", "import", str(annotated_trace), "--out", str(tmp_path / "x")]) == 2
    assert "no application" in capsys.readouterr().err


def test_swapped_bodies_stay_inside_the_named_op(tmp_path):
    """A compiled (here: wrapped) body runs inside atrex::<op>, so its work is still that operator's;
    one body is built per operator and init, however many calls there are."""
    built: list[str] = []

    def wrap(op, model):
        built.append(op)
        return lambda **inputs: model(**inputs)

    trace = record_trace(
        [Step("prefill", block(40, [40])), Step("decode", block(4, [1] * 4))],
        tmp_path / "wrapped.json",
        compile_model=wrap,
    )
    manifest = import_traces([TraceSpec("chat", trace)], tmp_path / "snap")
    assert sorted(built) == sorted(BLOCK_OPS)
    assert all(r.retained and r.calls == 2 for r in manifest.operators.values())
