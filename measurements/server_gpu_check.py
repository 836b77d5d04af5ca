"""The MCP server on a GPU, through a real in-memory MCP client: what CPU CI cannot show.

1. validate the shipped example (examples/rms_norm_triton.py) on every scored shape with timing,
   in optimize mode (time, S, DSL share per shape) and in benchmark mode (the same run with
   t_sol_ms / score / operator_score null);
2. profile_kernel on shape 0 (Nsight Compute when installed, else the labelled fallback);
3. the GPU queue under three concurrent timed validations: each job's start/end from its own
   progress messages, checked for overlap, with the queue positions the waiting calls heard;
4. cancellation on the GPU: a candidate whose forward hangs is cancelled once running; how long
   until its worker process is gone and the next timed job starts.

    python3 measurements/server_gpu_check.py --out measurements/results [--shapes 0,5,15]

Writes server_gpu_check.json (everything) and prints a short summary.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
from mcp import Client  # noqa: E402

from atrex_mcp.server.app import ServerConfig, build_server  # noqa: E402
from tests.server_fixtures import live_children, with_hanging_forward  # noqa: E402

EXAMPLE = ROOT / "examples" / "rms_norm_triton.py"
HANGING = with_hanging_forward(EXAMPLE.read_text(), 600)


async def _validate_all(workspace: Path, mode: str, shapes: list[str] | None) -> dict:
    cfg = ServerConfig(mode=mode, workspaces=[workspace], state_dir=workspace / "state")
    async with Client(build_server(cfg)) as client:
        started = time.monotonic()
        args = {"op": "rms_norm", "path": "kernel.py", "seeds": 3, **({"shapes": shapes} if shapes else {})}
        result = await client.call_tool("validate", args, read_timeout_seconds=580)
        return {
            "wall_s": time.monotonic() - started,
            "is_error": result.is_error,
            "result": result.structured_content or result.content[0].text,
        }


async def _profile(workspace: Path) -> dict:
    cfg = ServerConfig(workspaces=[workspace], state_dir=workspace / "state")
    async with Client(build_server(cfg)) as client:
        started = time.monotonic()
        result = await client.call_tool(
            "profile_kernel", {"op": "rms_norm", "path": "kernel.py", "shape": "0"}, read_timeout_seconds=580
        )
        return {
            "wall_s": time.monotonic() - started,
            "is_error": result.is_error,
            "result": result.structured_content or result.content[0].text,
        }


async def _queue(workspace: Path) -> dict:
    cfg = ServerConfig(workspaces=[workspace], state_dir=workspace / "state")
    events: dict[int, list[tuple[float, str]]] = {0: [], 1: [], 2: []}
    t0 = time.monotonic()

    async def one(client: Client, i: int) -> None:
        async def progress(value: float, total: float | None, message: str | None) -> None:
            events[i].append((time.monotonic() - t0, message or ""))

        await client.call_tool(
            "validate",
            {"op": "rms_norm", "path": "kernel.py", "shapes": ["0", "13"], "seeds": 1},
            progress_callback=progress,
            read_timeout_seconds=580,
        )
        events[i].append((time.monotonic() - t0, "returned"))

    async with Client(build_server(cfg)) as client, anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(one, client, i)
            await anyio.sleep(0.2)
    spans = []
    for i, evs in events.items():
        start = next(t for t, m in evs if "started on" in m)
        end = next(t for t, m in evs if m == "returned")
        spans.append((start, end, i))
    spans.sort()
    overlaps = [f"job {a[2]} and job {b[2]}" for a, b in itertools.pairwise(spans) if b[0] < a[1] - 0.05]
    return {
        "events": events,
        "spans": spans,
        "overlaps": overlaps,
        "positions_heard": {i: [m for _, m in evs if "queued" in m] for i, evs in events.items()},
    }


async def _cancel(workspace: Path) -> dict:
    cfg = ServerConfig(workspaces=[workspace], state_dir=workspace / "state")
    (workspace / "hang.py").write_text(HANGING)
    before = live_children()
    timeline: dict[str, float] = {}
    async with Client(build_server(cfg)) as client:
        running = anyio.Event()
        t0 = time.monotonic()

        async def progress(value: float, total: float | None, message: str | None) -> None:
            if "shape smoke" in (message or ""):
                running.set()

        async def follower() -> None:
            async def heard(value: float, total: float | None, message: str | None) -> None:
                if "started on" in (message or "") and "follower_started" not in timeline:
                    timeline["follower_started"] = time.monotonic() - t0

            await client.call_tool(
                "validate",
                {"op": "rms_norm", "path": "kernel.py", "shapes": ["smoke"], "seeds": 1},
                progress_callback=heard,
                read_timeout_seconds=580,
            )

        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()

            async def hang() -> None:
                with scope:
                    await client.call_tool(
                        "validate",
                        {"op": "rms_norm", "path": "hang.py", "shapes": ["smoke"], "seeds": 1},
                        progress_callback=progress,
                        read_timeout_seconds=580,
                    )

            tg.start_soon(hang)
            await running.wait()
            timeline["hanging_running"] = time.monotonic() - t0
            hanging_workers = live_children() - before
            tg.start_soon(follower)
            await anyio.sleep(1.0)
            scope.cancel()
            timeline["cancelled"] = time.monotonic() - t0
            while hanging_workers & live_children() and time.monotonic() - t0 < 120:
                await anyio.sleep(0.1)
            timeline["worker_gone"] = time.monotonic() - t0
    return {
        "timeline_s": timeline,
        "hanging_workers": sorted(hanging_workers),
        "hanging_workers_left": sorted(hanging_workers & live_children()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "measurements" / "results")
    parser.add_argument("--shapes", help="comma-separated shape ids for step 1 (default: every scored shape)")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    workspace = Path(tempfile.mkdtemp(prefix="atrex-server-gpu-"))
    shutil.copy(EXAMPLE, workspace / "kernel.py")
    shapes = args.shapes.split(",") if args.shapes else None
    record = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "validate_optimize": anyio.run(_validate_all, workspace, "optimize", shapes),
        "validate_benchmark": anyio.run(_validate_all, workspace, "benchmark", shapes),
        "profile": anyio.run(_profile, workspace),
        "queue": anyio.run(_queue, workspace),
        "cancel": anyio.run(_cancel, workspace),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "server_gpu_check.json").write_text(json.dumps(record, indent=1, default=str))
    opt, bench = record["validate_optimize"]["result"], record["validate_benchmark"]["result"]
    print(
        f"{record['gpu']}: validate all shapes {record['validate_optimize']['wall_s']:.0f} s, "
        f"passed {opt.get('passed')} failed {opt.get('failed')}, S_i {opt.get('operator_score')}"
    )
    print(
        "benchmark mode hides: t_sol/score all null = "
        f"{all(s['t_sol_ms'] is None and s['score'] is None for s in bench.get('shapes', []))}, operator_score = "
        f"{bench.get('operator_score')}"
    )
    profile = record["profile"]["result"]
    print(f"profile: {profile.get('tool') if isinstance(profile, dict) else profile}")
    print(
        f"queue overlaps: {record['queue']['overlaps'] or 'none'}; positions heard: "
        f"{record['queue']['positions_heard']}"
    )
    print(f"cancel: {record['cancel']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
