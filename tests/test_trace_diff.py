"""`trace diff A B`: weight changes, new and removed operators and shapes, as JSON and as text."""

from __future__ import annotations

import json

import pytest

from atrex_mcp.cli import main
from atrex_mcp.errors import AtrexError
from atrex_mcp.paths import problems_dir
from atrex_mcp.trace import TraceSpec, diff_problem_sets, import_traces, render_diff
from tests.trace_fixtures import KinetoBuilder, attention_args, mm_args, rms_norm_args


def trace(path, rms_tokens: list[int], attention: bool):
    b = KinetoBuilder()
    b.range("prefill", 0, 10_000)
    t = 10.0
    for tokens in rms_tokens:
        b.kernel("rms", 20, b.op("_C::rms_norm", t, 50, rms_norm_args(tokens, 64)))
        t += 100
    if attention:
        b.kernel("fmha", 60, b.op("atrex::attention_forward", t, 50, attention_args([100, 100])))
        t += 100
    b.kernel("gemm", 20, b.op("aten::mm", t, 50, mm_args(8, 64, 64)))
    return b.write(path)


@pytest.fixture
def snapshots(tmp_path):
    a = tmp_path / "a"
    import_traces([TraceSpec("chat", trace(tmp_path / "a.json", [100, 1000], attention=False))], a)
    b = tmp_path / "b"
    import_traces([TraceSpec("chat", trace(tmp_path / "b.json", [100, 3000], attention=True))], b)
    return a, b


def test_diff_of_two_snapshots(snapshots):
    a, b = snapshots
    d = diff_problem_sets(a, b)
    assert d.operators_added == ["attention_forward"] and d.operators_removed == []
    weights = {w.op: w for w in d.weights}
    assert weights["rms_norm"].a == 1.0 and weights["rms_norm"].b == pytest.approx(40 / 100)
    assert weights["attention_forward"].a is None and weights["attention_forward"].delta == pytest.approx(60 / 100)
    assert {w.op for w in d.weights[:2]} == {"rms_norm", "attention_forward"}  # largest |change| first
    (rms,) = d.shapes
    assert rms.op == "rms_norm" and rms.common == 1  # 100 → 128 in both
    assert [s["inputs"]["token_count"] for s in rms.added] == [4096]
    assert [s["inputs"]["token_count"] for s in rms.removed] == [1024]
    # A: rms 40 of 60; B: rms 40 + attention 60 of 120.
    assert d.unmapped_share == {"a": pytest.approx(20 / 60), "b": pytest.approx(20 / 120)}
    text = render_diff(d)
    assert "operators only in B (new): attention_forward" in text
    assert "rms_norm: +1 new, -1 removed, 1 common" in text
    assert "unmapped device-time share: A 33.33%  B 16.67%" in text


def test_diff_against_the_shipped_set_via_cli(snapshots, capsys):
    a, _ = snapshots
    assert main(["trace", "diff", str(problems_dir()), str(a), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert "unified_attention" in d["operators_removed"] and d["operators_added"] == []
    assert d["unmapped_share"]["a"] is None
    rms = next(s for s in d["shapes"] if s["op"] == "rms_norm")
    assert rms["common"] == 0 and len(rms["removed"]) == 56
    assert sum(w["b"] or 0 for w in d["weights"]) == pytest.approx(1.0)
    assert main(["trace", "diff", str(problems_dir()), str(a)]) == 0
    text = capsys.readouterr().out
    assert "operators only in A (removed): attention_forward, block_scaled_mm," in text
    assert "rms_norm: +2 new, -56 removed, 0 common" in text


def test_diff_needs_weights(tmp_path, snapshots):
    a, _ = snapshots
    (a / "weights.json").unlink()
    with pytest.raises(AtrexError, match=r"no weights\.json"):
        diff_problem_sets(a, a)
