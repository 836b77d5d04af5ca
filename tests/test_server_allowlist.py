"""`serve --tools`: a condition's tool allow-list held by the server itself (tools outside it are
not registered, so no client can call them), unknown names refused at start with the valid
choices; and the wiki_search schema lists the valid operator families."""

from __future__ import annotations

import pytest

from atrex_mcp import cli
from atrex_mcp.errors import AtrexError
from atrex_mcp.server.app import build_server
from atrex_mcp.wiki.corpus import OP_FAMILIES
from tests.server_fixtures import config, connect, result_text

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_only_allowed_tools_are_registered(tmp_path):
    async with connect(config(tmp_path, tools=["list_problems", "wiki_search"])) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        refused = await client.call_tool("validate", {"op": "rms_norm", "source": "x = 1"})
    assert names == {"list_problems", "wiki_search"}
    assert refused.is_error and "category: unknown_tool" in result_text(refused)


@pytest.mark.slow
async def test_run_tools_obey_the_allow_list_too(tmp_path):
    async with connect(config(tmp_path)) as client:
        every = {t.name for t in (await client.list_tools()).tools}
    run_tools = sorted(
        every
        - {
            "list_problems",
            "get_problem",
            "validate",
            "profile_kernel",
            "roofline_lookup",
            "wiki_search",
            "wiki_read",
            "package",
        }
    )
    assert run_tools, "the run-memory tools are registered through the same hook"
    async with connect(config(tmp_path, tools=[run_tools[0]])) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {run_tools[0]}


def test_unknown_tool_names_are_refused_with_the_choices(tmp_path):
    with pytest.raises(AtrexError) as caught:
        build_server(config(tmp_path, tools=["list_problems", "vaildate"]))
    assert caught.value.info.category == "unknown_tool" and "vaildate" in caught.value.info.message
    assert "validate" in caught.value.info.hint and "list_problems" in caught.value.info.hint


def test_serve_refuses_an_unknown_tool_before_serving(tmp_path, capsys):
    code = cli.main(
        [
            "serve",
            "--tools",
            "list_problems,bogus",
            "--state-dir",
            str(tmp_path / "state"),
            "--workspace",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "bogus" in err and "Valid choices:" in err and "profile_kernel" in err
    assert cli.main(["serve", "--tools", " , "]) == 2
    assert "give at least one tool name" in capsys.readouterr().err


async def test_wiki_search_lists_the_operator_families(tmp_path):
    async with connect(config(tmp_path, tools=["wiki_search"])) as client:
        (tool,) = (await client.list_tools()).tools
    described = str(tool.input_schema["properties"]["op_family"])
    assert all(family in described for family in OP_FAMILIES)
