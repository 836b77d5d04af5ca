"""validate, profile_kernel and package against the real evaluator on CPU (Triton interpreter,
smoke shape, one seed): verdicts in both eras, compile and numeric failures, progress with
queue positions, cancellation killing the sandbox worker, and the packaged artifact."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import anyio
import pytest

from atrex_mcp.paths import REPO_ROOT
from tests.server_fixtures import ERAS, config, connect, live_children, with_hanging_forward

pytestmark = pytest.mark.anyio

EXAMPLE = REPO_ROOT / "examples" / "rms_norm_triton.py"
SMOKE = {"op": "rms_norm", "shapes": ["smoke"], "seeds": 1}
# The example with a forward that hangs: only cancellation ends its evaluation early.
SLOW_FORWARD = with_hanging_forward(EXAMPLE.read_text(), 120)


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def workspace_config(tmp_path):
    cfg = config(tmp_path)
    shutil.copy(EXAMPLE, cfg.workspaces[0] / "kernel.py")
    return cfg


@pytest.mark.slow
@pytest.mark.parametrize("era", ERAS)
async def test_validate_the_example_kernel_by_path_and_by_source(workspace_config, era):
    async with connect(workspace_config, era) as client:
        by_path = (await client.call_tool("validate", {**SMOKE, "path": "kernel.py"})).structured_content
        by_source = (await client.call_tool("validate", {**SMOKE, "source": EXAMPLE.read_text()})).structured_content
    for result in (by_path, by_source):
        assert result["compiled"] and result["passed"] == 1 and result["failed"] == 0
        assert result["shapes"][0]["id"] == "smoke" and result["shapes"][0]["correct"] and len(result["seeds"]) == 1
        assert result["contract"]["passed"] and result["contract"]["kernels"] == ["_rms_norm_rows"]
    assert by_path["candidate_sha256"] == by_source["candidate_sha256"]


@pytest.mark.slow
async def test_compile_and_numeric_failures_name_stage_and_category(workspace_config):
    wrong = EXAMPLE.read_text().replace("y = x * inv_rms * w", "y = x * inv_rms * w * 1.5")
    assert wrong != EXAMPLE.read_text()
    async with connect(workspace_config) as client:
        broken = (await client.call_tool("validate", {**SMOKE, "source": "def broken(:\n"})).structured_content
        mismatch = (await client.call_tool("validate", {**SMOKE, "source": wrong})).structured_content
        neither = await client.call_tool("validate", {**SMOKE})
    assert not broken["compiled"] and broken["compile_error"]["stage"] == "compile" and broken["compile_error"]["hint"]
    shape = mismatch["shapes"][0]
    assert not shape["correct"] and (shape["stage"], shape["category"]) == ("correctness", "numeric_mismatch")
    assert shape["mismatch"] and shape["mismatch"][0]["max_abs_error"] > 0
    assert neither.is_error and "category: source_or_path" in neither.content[0].text


@pytest.mark.slow
async def test_concurrent_calls_queue_and_report_positions(tmp_path):
    cfg = config(tmp_path, correctness_limit=1)
    messages: list[list[str]] = [[], []]

    async def one(client, i):
        async def progress(value, total, message):
            messages[i].append(message)

        result = await client.call_tool(
            "validate", {**SMOKE, "source": EXAMPLE.read_text()}, progress_callback=progress
        )
        assert result.structured_content["passed"] == 1

    async with connect(cfg) as client, anyio.create_task_group() as tg:
        tg.start_soon(one, client, 0)
        await anyio.sleep(0.05)
        tg.start_soon(one, client, 1)
    assert any("started on cpu" in m for m in messages[0]) and any(m.endswith("done") for m in messages[0])
    assert any("queued, position 1 of 1" in m for m in messages[1])


async def test_cancelling_a_call_kills_its_worker(tmp_path):
    assert "time.sleep(120)" in SLOW_FORWARD
    before = live_children()
    async with connect(config(tmp_path)) as client:
        started = anyio.Event()

        async def progress(value, total, message):
            if "shape smoke" in message:
                started.set()

        with anyio.move_on_after(60) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    lambda: client.call_tool("validate", {**SMOKE, "source": SLOW_FORWARD}, progress_callback=progress)
                )
                await started.wait()
                assert live_children() - before, "the sandbox worker should be running"
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught
        deadline = time.monotonic() + 30
        while live_children() - before and time.monotonic() < deadline:
            await anyio.sleep(0.2)
    assert not live_children() - before


@pytest.mark.parametrize("era", ERAS)
async def test_profile_kernel_on_cpu_is_stored_and_says_what_it_cannot_measure(workspace_config, era):
    async with connect(workspace_config, era) as client:
        result = await client.call_tool("profile_kernel", {"op": "rms_norm", "path": "kernel.py"})
    profile = result.structured_content
    assert not result.is_error, result.content[0].text
    assert profile["profile_id"].startswith("prof-") and profile["shape"] == "smoke"
    assert profile["fallback"] and profile["tool"] == "torch.profiler" and "no GPU" in profile["note"]
    assert profile["bottleneck"]["kind"] == "unknown" and profile["mode"] == "optimize"


@pytest.mark.parametrize("era", ERAS)
async def test_package_writes_artifact_and_manifest_inside_the_workspace(workspace_config, era):
    async with connect(workspace_config, era) as client:
        packaged = (await client.call_tool("package", {"op": "rms_norm", "path": "kernel.py"})).structured_content
        again = await client.call_tool(
            "package", {"op": "rms_norm", "path": "kernel.py", "out_dir": "atrex-package/rms_norm"}
        )
    artifact = Path(packaged["artifact"])
    assert artifact.parent == workspace_config.workspaces[0] / "atrex-package" / "rms_norm"
    assert artifact.read_text().startswith('"""rms_norm in Triton') and packaged["contract"]["passed"]
    assert packaged["manifest_data"]["artifact"]["sha256"] == packaged["sha256"]
    assert not again.is_error  # re-packaging into its own folder is allowed


async def test_validate_reports_the_contract_and_package_refuses_and_records_the_refusal(workspace_config):
    from atrex_mcp.package import last_refusal

    leaky = EXAMPLE.read_text().replace("import torch\n", "import torch\nfrom os import listdir\n", 1)
    line = leaky.splitlines().index("from os import listdir") + 1
    (workspace_config.workspaces[0] / "leaky.py").write_text(leaky)
    async with connect(workspace_config) as client:
        verdict = (await client.call_tool("validate", {**SMOKE, "path": "leaky.py"})).structured_content
        refused = await client.call_tool("package", {"op": "rms_norm", "path": "leaky.py"})
    assert verdict["passed"] == 1 and not verdict["contract"]["passed"]
    (violation,) = verdict["contract"]["violations"]
    assert (violation["rule"], violation["line"]) == ("file_or_network_access", line)
    assert "os.environ.get" in violation["fix"]
    text = refused.content[0].text
    assert refused.is_error and f"file_or_network_access (line {line}): import of os.listdir" in text
    assert "os.environ.get" in text  # the fix travels with the refusal
    recorded = last_refusal(workspace_config.state_dir, "rms_norm")
    assert recorded is not None and recorded.violations == [type(recorded.violations[0])(**violation)]
    assert not (workspace_config.workspaces[0] / "atrex-package").exists()
