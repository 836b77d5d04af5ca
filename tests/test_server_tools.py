"""Every tool through an in-memory MCP client, in both protocol eras: schemas, annotations,
structured results, errors with stage/category/message/hint, mode differences, output cap."""

from __future__ import annotations

import json

import pytest

from atrex_mcp.paths import problems_dir
from atrex_mcp.server.app import fit_output
from atrex_mcp.server.models import ProblemDetail
from atrex_mcp.views import ToolOutput
from tests.server_fixtures import ERAS, config, connect

pytestmark = pytest.mark.anyio

TOOLS = {
    "list_problems",
    "get_problem",
    "validate",
    "profile_kernel",
    "roofline_lookup",
    "wiki_search",
    "wiki_read",
    "package",
}
READ_ONLY = {"list_problems", "get_problem", "roofline_lookup", "wiki_search", "wiki_read"}


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(params=ERAS)
def era(request):
    return request.param


async def test_tool_surface(tmp_path, era):
    async with connect(config(tmp_path), era) as client:
        assert client.protocol_version == ("2025-11-25" if era == "legacy" else "2026-07-28")
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) >= TOOLS
    for name in TOOLS:
        tool = tools[name]
        assert tool.description and len(tool.description) > 60, name
        assert tool.output_schema and tool.output_schema["type"] == "object", name
        assert tool.annotations.read_only_hint is (name in READ_ONLY), name
        for prop, schema in tool.input_schema.get("properties", {}).items():
            assert schema.get("description") or "$ref" in schema or "anyOf" in schema, (name, prop)


async def test_list_and_get_problem_in_optimize_mode(tmp_path, era):
    async with connect(config(tmp_path), era) as client:
        listed = (await client.call_tool("list_problems", {})).structured_content
        got = await client.call_tool("get_problem", {"op": "rms_norm"})
    names = [p["name"] for p in listed["problems"]]
    assert listed["mode"] == "optimize" and "rms_norm" in names and len(names) >= 30
    rms = next(p for p in listed["problems"] if p["name"] == "rms_norm")
    assert rms["forward_inputs"] == ["x", "weight"] and rms["smoke_shape"] == "smoke"
    detail = ProblemDetail.model_validate(got.structured_content)
    assert "class Model" in detail.reference_py and "def make_inputs" in detail.input_py
    scored = [s for s in detail.shapes if not s.smoke]
    assert all(s.roofline and s.roofline.t_sol_ms > 0 for s in scored)
    assert any("triton" in rule for rule in detail.rules) and "triton" in detail.allowed_imports
    # shapes.json travels once, as the parsed shapes, which hold all of it.
    stored = json.loads((problems_dir() / "rms_norm" / "shapes.json").read_text())
    rebuilt = [
        {"id": s.id, "init": s.init, "inputs": s.inputs, **({"smoke": True} if s.smoke else {})} for s in detail.shapes
    ]
    assert "shapes_json" not in got.structured_content and rebuilt == stored["shapes"]


async def test_get_problem_hides_roofline_in_benchmark_mode(tmp_path, era):
    async with connect(config(tmp_path, "benchmark"), era) as client:
        got = (await client.call_tool("get_problem", {"op": "rms_norm"})).structured_content
    assert got["mode"] == "benchmark" and all(s["roofline"] is None for s in got["shapes"])


async def test_unknown_names_are_answered_with_the_choices(tmp_path, era):
    async with connect(config(tmp_path), era) as client:
        unknown_op = await client.call_tool("get_problem", {"op": "rms_nrom"})
        unknown_hw = await client.call_tool("roofline_lookup", {"flops": 1, "hardware": "h9000"})
        unknown_shape = await client.call_tool("roofline_lookup", {"op": "rms_norm", "shape": "999"})
        bad_arg = await client.call_tool("wiki_search", {"query": "x", "limit": 500})
        no_tool = await client.call_tool("valdate", {})
    for result, category in (
        (unknown_op, "unknown_problem"),
        (unknown_hw, "unknown_hardware"),
        (unknown_shape, "unknown_shape"),
    ):
        text = result.content[0].text
        assert (
            result.is_error
            and f"category: {category}" in text
            and "stage: input" in text
            and "hint: Valid choices:" in text
        )
    assert "rms_norm" in unknown_op.content[0].text and "h200" in unknown_hw.content[0].text
    text = bad_arg.content[0].text
    assert (
        bad_arg.is_error
        and "category: invalid_arguments" in text
        and "less than or equal to 20" in text
        and "hint:" in text
    )
    text = no_tool.content[0].text
    assert no_tool.is_error and "category: unknown_tool" in text and "validate" in text.split("hint:")[1]


async def test_roofline_calculator_and_problem_lookup(tmp_path, era):
    async with connect(config(tmp_path), era) as client:
        calc = (
            await client.call_tool(
                "roofline_lookup",
                {"flops": 2 * 10**12, "dtype_path": "fp8_e4m3", "bytes_read": 10**9, "hardware": "h200"},
            )
        ).structured_content
        problem = (await client.call_tool("roofline_lookup", {"op": "rms_norm", "shape": "0"})).structured_content
        half = await client.call_tool("roofline_lookup", {"op": "rms_norm"})
        smoke = await client.call_tool("roofline_lookup", {"op": "rms_norm", "shape": "smoke"})
    assert calc["bound"] == "compute" and calc["t_sol_ms"] == pytest.approx(calc["compute_ms"])
    assert calc["compute_ms"] == pytest.approx(1000 * 2e12 / calc["peaks"]["fp8_e4m3"])
    assert calc["arithmetic_intensity"] == pytest.approx(2000.0) and calc["sources"]
    assert problem["problem"] == "rms_norm" and problem["bound"] == "memory" and problem["t_sol_ms"] > 0
    assert half.is_error and "category: op_and_shape" in half.content[0].text
    # The smoke shape is listed by get_problem but not scored: a clear input error, not an internal one.
    assert (
        smoke.is_error and "stage: input" in smoke.content[0].text and "category: no_roofline" in smoke.content[0].text
    )


async def test_roofline_lookup_is_a_calculator_only_in_benchmark_mode(tmp_path, era):
    async with connect(config(tmp_path, "benchmark"), era) as client:
        calc = await client.call_tool("roofline_lookup", {"flops": 10**9, "bytes_read": 10**6})
        refused = await client.call_tool("roofline_lookup", {"op": "rms_norm", "shape": "0"})
    assert not calc.is_error and calc.structured_content["t_sol_ms"] > 0
    text = refused.content[0].text
    assert refused.is_error and "hidden in benchmark mode" in text and "stage: policy" in text and "hint:" in text


async def test_wiki_search_and_paged_read(tmp_path, era):
    async with connect(config(tmp_path), era) as client:
        found = (
            await client.call_tool("wiki_search", {"query": "row reduction rms norm", "limit": 3})
        ).structured_content
        doc_id = found["hits"][0]["doc_id"]
        first = (await client.call_tool("wiki_read", {"doc_id": doc_id, "max_chars": 1000})).structured_content
        second = (
            await client.call_tool("wiki_read", {"doc_id": doc_id, "offset": 1000, "max_chars": 1000})
        ).structured_content
        missing = await client.call_tool("wiki_read", {"doc_id": "docs/patterns/row-reduction"})
    assert 1 <= len(found["hits"]) <= 3 and found["hits"][0]["snippet"]
    assert len(first["doc"]["text"]) == 1000 and "offset=1000" in first["notes"][0]
    assert second["doc"]["text"] and second["doc"]["text"] != first["doc"]["text"]
    assert (
        missing.is_error
        and "category: unknown_wiki_doc" in missing.content[0].text
        and "row-reductions" in missing.content[0].text
    )


def test_fit_output_cuts_the_longest_text_and_says_so():
    class Big(ToolOutput):
        small: str
        big: str
        items: list[int]

    fitted = fit_output(Big(small="keep me", big="x" * 50_000, items=list(range(10))), 5_000)
    assert len(fitted.model_dump_json()) <= 5_000
    assert fitted.small == "keep me" and fitted.items == list(range(10))
    assert "truncated by the server" in fitted.big and "big" in fitted.notes[0]
    many = fit_output(Big(small="s", big="b", items=list(range(5_000))), 2_000)
    assert len(many.model_dump_json()) <= 2_000 and "items" in many.notes[0]
    # Texts that cannot make it fit are cut once each (a cut text stays above the minimum, so cutting it
    # again would never end).
    stuck = fit_output(Big(small="s" * 300, big="b" * 300, items=list(range(5_000))), 1_000)
    assert stuck.small.count("truncated by the server") == 1 and stuck.big.count("truncated by the server") == 1


def test_get_problem_of_the_largest_problem_fits_and_keeps_what_a_kernel_needs():
    """unified_attention's answer is larger than the cap: the reference, input generator and rules
    stay whole, shapes that do not fit are left out, and the answer says how to ask for them
    (shape_ids)."""
    from atrex_mcp.policy import Policy
    from atrex_mcp.problemset.catalog import Catalog
    from atrex_mcp.server.app import DEFAULT_MAX_OUTPUT_CHARS, ServerConfig, ServerContext
    from atrex_mcp.server.tools import get_problem

    catalog = Catalog()
    visible = catalog.visible("unified_attention")
    app = ServerContext.__new__(ServerContext)
    app.catalog, app.policy, app.config = catalog, Policy("optimize", catalog), ServerConfig(mode="optimize")
    detail = get_problem(app, "unified_attention")
    fitted = fit_output(detail, DEFAULT_MAX_OUTPUT_CHARS)
    assert len(fitted.model_dump_json()) <= DEFAULT_MAX_OUTPUT_CHARS
    assert fitted.reference_py == visible.reference_source and fitted.input_py == visible.input_source
    assert fitted.rules == detail.rules and "truncated by the server" not in fitted.model_dump_json()
    assert "shape_ids" in fitted.notes[-1]
    kept = {s.id for s in fitted.shapes}
    rest = [s.id for s in detail.shapes if s.id not in kept]
    assert rest, "the test needs a problem whose shapes do not all fit"
    assert f"left out: ids {', '.join(rest)})" in fitted.notes[-1]  # the ids to ask for, the smoke shape among them
    assert "smoke" in rest
    again = get_problem(app, "unified_attention", shape_ids=rest)
    assert [s.id for s in again.shapes] == rest


async def test_isolation_warnings_are_listed_once_per_session_and_logged(tmp_path, monkeypatch, caplog):
    from atrex_mcp.evaluate.models import DeviceInfo, EvalResult, Isolation, ShapeResult
    from atrex_mcp.server.app import ServerContext

    uid_warning = "uid 65534 cannot reach the interpreter: the worker stays uid 0 with every capability dropped"
    seccomp_warning = "seccomp is unavailable: no syscall filter"
    evaluations = iter([[uid_warning], [uid_warning], [uid_warning, seccomp_warning]])

    async def canned(self, mcp_ctx, request):
        return EvalResult(
            op=request.op,
            candidate="candidate",
            candidate_sha256="0" * 64,
            dsl="triton",
            hardware="h200",
            compiled=True,
            shapes=[ShapeResult(id="smoke", correct=True)],
            device=DeviceInfo(kind="cpu"),
            isolation=Isolation(warnings=next(evaluations)),
            started_at="2026-01-01T00:00:00Z",
        )

    monkeypatch.setattr(ServerContext, "evaluate", canned)
    args = {"op": "rms_norm", "shapes": ["smoke"], "seeds": 1, "source": "class Model: pass\n"}
    async with connect(config(tmp_path)) as client:
        answers = [(await client.call_tool("validate", args)).structured_content for _ in range(3)]
    first, second, third = answers
    assert first["isolation_warnings"] == [uid_warning] and "atrex-mcp doctor" in first["notes"][-1]
    assert second["isolation_warnings"] == [] and not any("isolation" in n for n in second["notes"])
    assert third["isolation_warnings"] == [seccomp_warning]  # a new limit is news once too
    # The operator still has every warning, once, in the server's log.
    logged = [r.getMessage() for r in caplog.records if "sandbox isolation" in r.getMessage()]
    assert len(logged) == 2 and uid_warning in logged[0] and seccomp_warning in logged[1]
