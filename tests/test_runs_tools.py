"""The run tools through an in-memory MCP client (both protocol eras), with the scripted judge
in place of the evaluator: the whole loop, and what benchmark mode leaves out."""

from __future__ import annotations

import dataclasses

import pytest

from atrex_mcp.runs.models import KernelTimes
from atrex_mcp.runs.store import RunStore
from tests.runs_fixtures import ScriptedJudge, plan, source
from tests.server_fixtures import ERAS, config, connect, hidden_figures, leaks, result_text

pytestmark = pytest.mark.anyio
RUN_TOOLS = {
    "start_run",
    "submit_baseline",
    "record_iteration",
    "run_state",
    "partial_restart",
    "unmask",
    "package_run",
}


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(autouse=True)
def scripted_judge(monkeypatch):
    judge = ScriptedJudge()
    monkeypatch.setattr("atrex_mcp.server.run_tools.default_judge_factory", lambda ctx: lambda device: judge)
    return judge


async def call(client, name, args):
    result = await client.call_tool(name, args)
    assert not result.is_error, result.content[0].text
    return result.structured_content


@pytest.mark.parametrize("era", ERAS)
async def test_the_loop_through_the_tools(tmp_path, era):
    cfg = config(tmp_path)
    async with connect(cfg, era) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) >= RUN_TOOLS
        assert (
            tools["run_state"].annotations.read_only_hint and not tools["record_iteration"].annotations.read_only_hint
        )
        assert "category" in str(tools["record_iteration"].input_schema)

        started = await call(client, "start_run", {"op": "rms_norm", "shapes": ["0", "1"]})
        run_id = started["run_id"]
        assert started["roofline"]["shapes"]["0"]["t_sol_ms"] > 0
        base = await call(client, "submit_baseline", {"run_id": run_id, "source": source(1.0, "base")})
        assert base["record"]["number"] == 0 and base["accepted"] == 0

        profile_id = RunStore(cfg.state_dir).save_profile(
            op="rms_norm", shape="0", source_sha256="0" * 64, tool="ncu", report={}, run_id=run_id
        )
        step = plan(profile_id).model_dump(mode="json", exclude={"knowledge"})
        faster = await call(client, "record_iteration", {"run_id": run_id, "plan": step, "source": source(1.4, "a")})
        slower = await call(client, "record_iteration", {"run_id": run_id, "plan": step, "source": source(1.1, "b")})
        assert faster["record"]["status"] == "accepted" and faster["accepted"] == 1
        assert slower["record"]["status"] == "rejected" and slower["accepted"] == 1

        bad_plan = await client.call_tool(
            "record_iteration", {"run_id": run_id, "plan": {**step, "category": "magic"}, "source": source(2.0, "c")}
        )
        assert bad_plan.is_error

        state = await call(client, "run_state", {"run_id": run_id})
        assert state["accepted"]["number"] == 1 and state["summary"]["visible"] == 2
        mask = (await call(client, "partial_restart", {"run_id": run_id, "fraction": 1.0, "seed": 4}))["mask"]
        assert mask["masked"] == [2]
        assert (await call(client, "run_state", {"run_id": run_id}))["summary"]["visible"] == 1
        assert len((await call(client, "unmask", {"run_id": run_id}))["reverted"]) == 1

        packaged = await call(client, "package_run", {"run_id": run_id})
        assert packaged["manifest_data"]["run"]["chain"][-1]["number"] == 1
        assert packaged["artifact"].startswith(str(tmp_path / "workspace"))

        missing = await client.call_tool("run_state", {"run_id": "run-unknown"})
        assert missing.is_error and "category: unknown_run" in missing.content[0].text


@pytest.mark.slow
async def test_benchmark_mode_leaves_out_roofline_and_scores(tmp_path):
    cfg = config(tmp_path, "benchmark")
    numbers, strings = hidden_figures("rms_norm")
    async with connect(cfg) as client:
        started = await call(client, "start_run", {"op": "rms_norm", "shapes": ["0", "1"]})
        run_id = started["run_id"]
        assert started["roofline"] is None
        texts = [
            result_text(await client.call_tool("submit_baseline", {"run_id": run_id, "source": source(1.0, "base")}))
        ]
        profile_id = RunStore(cfg.state_dir).save_profile(
            op="rms_norm", shape="0", source_sha256="0" * 64, tool="ncu", report={}
        )
        step = plan(profile_id).model_dump(mode="json", exclude={"knowledge"})
        texts.append(
            result_text(
                await client.call_tool("record_iteration", {"run_id": run_id, "plan": step, "source": source(1.5, "a")})
            )
        )
        state = await client.call_tool("run_state", {"run_id": run_id})
        texts.append(result_text(state))
        texts.append(result_text(await client.call_tool("package_run", {"run_id": run_id})))
    assert state.structured_content["roofline"] is None
    assert state.structured_content["accepted"]["times"]["score"] == {}
    for text in texts:
        assert "t_sol_ms" not in text and leaks(text, numbers, strings) == []


class NoGpuJudge(ScriptedJudge):
    """A judge on a server without a GPU: correctness only, nothing timed."""

    def check(self, op, source, shapes, *, hardware, dsl, timing, progress=None, cancel=None):
        result = super().check(op, source, shapes, hardware=hardware, dsl=dsl, timing=False)
        return dataclasses.replace(result, times=KernelTimes(time_ms=dict.fromkeys(shapes)))  # as the evaluator on CPU

    def time_pair(self, op, accepted_source, candidate_source, shapes, *, hardware, progress=None, cancel=None):
        return None


async def test_without_a_gpu_a_correct_iteration_says_it_was_untimed_not_slower(tmp_path, monkeypatch):
    judge = NoGpuJudge()
    monkeypatch.setattr("atrex_mcp.server.run_tools.default_judge_factory", lambda ctx: lambda device: judge)
    cfg = config(tmp_path)
    async with connect(cfg) as client:
        run_id = (await call(client, "start_run", {"op": "rms_norm", "shapes": ["0", "1"]}))["run_id"]
        base = await call(client, "submit_baseline", {"run_id": run_id, "source": source(1.0, "base")})
        profile_id = RunStore(cfg.state_dir).save_profile(
            op="rms_norm", shape="0", source_sha256="0" * 64, tool="ncu", report={}, run_id=run_id
        )
        step = plan(profile_id).model_dump(mode="json", exclude={"knowledge"})
        untimed = await call(client, "record_iteration", {"run_id": run_id, "plan": step, "source": source(1.4, "a")})
        wrong = await call(
            client, "record_iteration", {"run_id": run_id, "plan": step, "source": source(1.4, "b", wrong=True)}
        )
    assert not base["timed"] and "stored as the baseline, but not timed: this server has no GPU" in base["notes"][0]
    # The stored verdict is unchanged (the audit reads it); the answer says what it means and what to do.
    assert untimed["record"]["status"] == "rejected" and untimed["accepted"] == 0 and not untimed["timed"]
    assert untimed["record"]["reason"].startswith("not timed")
    note = untimed["notes"][0]
    assert "Correct on every target shape, but not timed" in note and "does not mean slower" in note
    assert "server with a GPU" in note
    # A failed kernel gets no such note: it was not correct.
    assert wrong["record"]["status"] == "failed" and wrong["notes"] == [] and not wrong["timed"]
