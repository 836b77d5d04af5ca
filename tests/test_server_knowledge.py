"""The knowledge condition: in benchmark mode the wiki (general, the default) hands out no kernel
or article that solves a served operator, `full` hands out everything, `none` has no wiki tools;
the rule that decides which operators a document solves; and every result and report records
the condition."""

from __future__ import annotations

import shutil

import pytest

from atrex_mcp.agentbench.endpoint import server_command
from atrex_mcp.agentbench.prompts import allowed_tools, render_prompt
from atrex_mcp.agentbench.report import MainRow
from atrex_mcp.agentbench.report_render import _main_row
from atrex_mcp.errors import AtrexError
from atrex_mcp.evaluate.models import DeviceInfo, EvalResult, Isolation
from atrex_mcp.paths import problems_dir
from atrex_mcp.policy import Policy
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.server.app import ServerConfig, build_server
from atrex_mcp.wiki.corpus import WikiEntry
from atrex_mcp.wiki.solutions import solved_names
from tests.server_fixtures import config, connect

pytestmark = pytest.mark.anyio
RMS_NORM_DOCS = {"kernels/rms_norm", "docs/recipes/rms-norm"}


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def _search(client, query: str, limit: int = 20) -> list[str]:
    result = await client.call_tool("wiki_search", {"query": query, "limit": limit})
    assert not result.is_error, result.content[0].text
    return [hit["doc_id"] for hit in result.structured_content["hits"]]


async def test_benchmark_mode_with_general_knowledge_hands_out_no_rms_norm_solution(tmp_path):
    async with connect(config(tmp_path, "benchmark")) as client:
        listed = (await client.call_tool("list_problems", {})).structured_content
        assert listed["knowledge"] == "general"
        for query in (
            "rms_norm triton kernel",
            "RMS norm recipe rows per program",
            "kernels/rms_norm",
            "fused moe kernel",
        ):
            found = await _search(client, query)
            assert found and not any(d.startswith("kernels/") for d in found), (query, found)
            assert not RMS_NORM_DOCS & set(found) and "docs/recipes/fused-moe" not in found
        for doc_id in ("kernels/rms_norm", "docs/recipes/rms-norm", "kernels/fused_moe", "docs/recipes/silu-and-mul"):
            refused = await client.call_tool("wiki_read", {"doc_id": doc_id})
            assert refused.is_error and "category: withheld_in_knowledge_condition" in refused.content[0].text
            assert "def " not in refused.content[0].text
        near = await client.call_tool("wiki_read", {"doc_id": "kernels/rms_norn"})
        assert near.is_error and "kernels/rms_norm" not in near.content[0].text  # no hint toward a withheld document
        general = await client.call_tool("wiki_read", {"doc_id": "docs/patterns/row-reductions"})
        assert not general.is_error and "Row-wise reductions" in general.structured_content["doc"]["text"]


@pytest.mark.parametrize("mode", ["benchmark", "optimize"])
async def test_full_knowledge_hands_out_the_kernels(tmp_path, mode):
    cfg = config(tmp_path, mode, knowledge="full") if mode == "benchmark" else config(tmp_path, mode)
    async with connect(cfg) as client:
        assert (await client.call_tool("list_problems", {})).structured_content["knowledge"] == "full"
        found = await _search(client, "rms_norm triton kernel", limit=5)
        assert "kernels/rms_norm" in found
        read = await client.call_tool("wiki_read", {"doc_id": "kernels/rms_norm"})
        assert not read.is_error and "@triton.jit" in read.structured_content["doc"]["text"]


async def test_general_withholds_only_the_served_operators_solutions(tmp_path):
    """A server that serves silu_and_mul alone may hand out the rms_norm kernel, not its own."""
    root = tmp_path / "problems"
    shutil.copytree(problems_dir() / "silu_and_mul", root / "silu_and_mul")
    async with connect(config(tmp_path, "benchmark", problems=[root])) as client:
        found = await _search(client, "rms_norm triton kernel")
        assert "kernels/rms_norm" in found
        assert "kernels/silu_and_mul" not in await _search(client, "silu and mul swiglu activation kernel")


async def test_no_knowledge_offers_no_wiki_tools(tmp_path):
    cfg = config(tmp_path, "benchmark", knowledge="none")
    async with connect(cfg) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "wiki_search" not in names and "wiki_read" not in names and {"validate", "package", "start_run"} <= names
        assert (await client.call_tool("list_problems", {})).structured_content["knowledge"] == "none"
        called = await client.call_tool("wiki_search", {"query": "rms_norm"})
        assert called.is_error and "category: unknown_tool" in called.content[0].text
    with pytest.raises(AtrexError) as err:
        build_server(
            ServerConfig(
                mode="benchmark",
                state_dir=tmp_path / "s2",
                workspaces=[tmp_path],
                devices=["cpu"],
                knowledge="none",
                tools=["validate", "wiki_search"],
            )
        )
    assert err.value.info.category == "wiki_disabled"


def _entry(
    kind: str, title: str = "t", body: str = "", code: str = "", tags=(), operators=(), rel_path="x.md"
) -> WikiEntry:
    return WikiEntry(
        doc_id="d",
        kind=kind,
        category="recipes",
        title=title,
        body=body,
        code=code,
        rel_path=rel_path,
        tags=list(tags),
        operators=list(operators),
    )


@pytest.mark.parametrize(
    "entry, solves",
    [
        (_entry("kernel", operators=["rms_norm"]), True),
        (_entry("doc", title="Recipe: RMS norm in Triton (rms_norm)"), True),
        (_entry("doc", tags=["rms_norm", "row reduction"]), True),
        (_entry("doc", operators=["rms_norm"]), True),
        (_entry("doc", body="Reference kernel: [kernels/rms_norm](kernels/rms_norm)."), True),
        (
            _entry(
                "doc",
                body="```python\n@triton.jit\ndef k(): ...\nclass Model: ...\n```\nThis is rms_norm.",
                code="@triton.jit\ndef k(): ...\nclass Model: ...",
            ),
            True,
        ),
        (_entry("source", body="void rms_norm(float* x) {}", rel_path="csrc/layernorm.cu"), True),
        (_entry("source", body="int main() {}", rel_path="csrc/rms_norm/main.cu"), True),
        (
            _entry(
                "doc", title="Row-wise reductions", body="norms such as rms_norm reduce over a row", code="tl.sum(x)"
            ),
            False,
        ),
        (_entry("doc", title="Recipe: fused add + RMS norm (fused_add_rms_norm)"), False),
        (_entry("kernel", operators=["l2_norm"]), False),
    ],
)
def test_which_operators_a_document_solves(entry, solves):
    assert ("rms_norm" in solved_names(entry)) is solves


def test_every_kernel_of_a_served_operator_and_its_recipe_are_withheld():
    """Over the shipped wiki: each kernel whose operator is served is withheld under general, as
    is the recipe that names it; the hardware, pattern, pitfall and profiling articles stay."""
    from atrex_mcp.paths import wiki_dir
    from atrex_mcp.wiki.corpus import READERS, wiki_files

    served = set(Catalog().names())
    entries = [READERS[f.kind](f) for f in wiki_files(wiki_dir())]
    withheld = {e.doc_id for e in entries if solved_names(e) & served}
    kernels = {e.doc_id for e in entries if e.kind == "kernel" and e.operators[0] in served}
    assert kernels and kernels <= withheld and "docs/recipes/rms-norm" in withheld
    kept = {e.doc_id for e in entries} - withheld
    for family in ("docs/hardware/", "docs/patterns/", "docs/profiling/"):
        assert sum(d.startswith(family) for d in kept) >= 5, family


def _eval_result() -> EvalResult:
    return EvalResult(
        op="rms_norm",
        candidate="candidate",
        candidate_sha256="0" * 64,
        dsl="triton",
        hardware="h200",
        compiled=True,
        device=DeviceInfo(kind="cpu"),
        isolation=Isolation(),
        started_at="2026-01-01T00:00:00+00:00",
    )


def test_results_and_reports_record_the_condition(tmp_path):
    assert Policy("benchmark", Catalog()).validate_view(_eval_result()).knowledge == "general"
    assert Policy("optimize", Catalog()).validate_view(_eval_result()).knowledge == "full"
    assert Policy("benchmark", Catalog(), knowledge="none").validate_view(_eval_result()).knowledge == "none"
    assert (
        EvalResult.model_validate_json(
            _eval_result().model_copy(update={"knowledge": "general"}).model_dump_json()
        ).knowledge
        == "general"
    )
    row = MainRow(
        run="r",
        agent="claude",
        condition="optimizer",
        knowledge="general",
        model=None,
        operators=1,
        submitted=1,
        evaluated=1,
        compile_rate=1.0,
        correctness=1.0,
        fully_correct=1.0,
        dsl_adoption=None,
        s=None,
        s_agg=None,
        vs_torch_compile=None,
        vs_eager=None,
        timed=False,
        dsl_measured=False,
    )
    assert _main_row(row)[:4] == ["r", "claude", "optimizer", "general"]


def test_bench_runs_start_the_server_with_their_condition(tmp_path):
    from atrex_mcp.agentbench.models import RunConfig

    legacy = {
        "name": "old",
        "agent": {"kind": "claude"},
        "ops": ["rms_norm"],
        "dsl": "triton",
        "condition": "optimizer",
        "budget_s": 60.0,
        "problems": [str(problems_dir())],
        "hardware": "h200",
        "server": "stdio",
        "isolation": {"agent_uid": 0, "agent_gid": 0, "server_uid": 0, "transport": "stdio"},
        "created_at": "then",
        "atrex_mcp_version": "0",
    }
    assert RunConfig.model_validate(legacy).knowledge == "full"  # a run made before the condition had the whole wiki
    assert "wiki_search" not in allowed_tools("optimizer", "none") and "wiki_search" in allowed_tools(
        "optimizer", "general"
    )
    assert "no wiki" in render_prompt("optimizer", "rms_norm", "triton", 600, "none")
    assert "no wiki" not in render_prompt("optimizer", "rms_norm", "triton", 600, "general")
    assert "no wiki" not in render_prompt("vanilla", "rms_norm", "triton", 600, "none")


def test_the_bench_server_command_carries_the_condition(tmp_path):
    class _Config:
        knowledge, hardware, problems = "general", "h200", [str(problems_dir())]

    argv = server_command(_Config(), tmp_path, tmp_path / "state", log_level="INFO")
    assert argv[argv.index("--knowledge") + 1] == "general" and "--benchmark-mode" in argv
