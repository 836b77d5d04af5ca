"""A fake Anthropic Messages API (POST /v1/messages, streamed or not) that plays a Script.

Claude Code names MCP tools `mcp__<server>__<tool>`; the fake offers the step's tool by that
suffix. Token usage is reported (fixed small numbers) so the driver's usage parsing is exercised.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.fake_models.script import FakeModelServer, Script, json_bytes, sse

USAGE_IN, USAGE_OUT = 100, 20


def _tool_results(body: dict[str, Any]) -> int:
    count = 0
    for message in body.get("messages", []):
        if message.get("role") == "user" and isinstance(message.get("content"), list):
            count += sum(
                1 for block in message["content"] if isinstance(block, dict) and block.get("type") == "tool_result"
            )
    return count


def _offered(body: dict[str, Any], tool: str) -> str | None:
    for t in body.get("tools") or []:
        name = t.get("name", "")
        if name == tool or name.endswith(f"__{tool}"):
            return name
    return None


def _respond(fake: FakeModelServer, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    if path.rstrip("/").endswith("/count_tokens"):
        return 200, "application/json", json_bytes({"input_tokens": USAGE_IN})
    if not path.split("?")[0].rstrip("/").endswith("/v1/messages"):
        return (
            404,
            "application/json",
            json_bytes({"type": "error", "error": {"type": "not_found_error", "message": path}}),
        )
    step = fake.script.step(_tool_results(body))
    name = _offered(body, step.tool) if step else None
    if name is not None:
        block: dict[str, Any] = {
            "type": "tool_use",
            "id": "toolu_" + uuid.uuid4().hex[:16],
            "name": name,
            "input": step.arguments,
        }
        stop, answer = "tool_use", f"tool:{step.tool}"
    else:
        text = fake.script.final_text if step is None and _tool_results(body) else "ok"
        block, stop, answer = {"type": "text", "text": text}, "end_turn", "final" if step is None else "text"
    fake.record(path, body, answer)
    message = {
        "id": "msg_" + uuid.uuid4().hex[:16],
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake"),
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": USAGE_IN, "output_tokens": 1},
    }
    if not body.get("stream"):
        return (
            200,
            "application/json",
            json_bytes(
                {
                    **message,
                    "content": [block],
                    "stop_reason": stop,
                    "usage": {"input_tokens": USAGE_IN, "output_tokens": USAGE_OUT},
                }
            ),
        )
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {**message, "content": []}}]
    if block["type"] == "tool_use":
        events += [
            {"type": "content_block_start", "index": 0, "content_block": {**block, "input": {}}},
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
            },
        ]
    else:
        events += [
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": block["text"]}},
        ]
    events += [
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": USAGE_OUT},
        },
        {"type": "message_stop"},
    ]
    return 200, "text/event-stream", sse(events)


def fake_anthropic(script: Script) -> FakeModelServer:
    """A fake Messages API for `script`; point ANTHROPIC_BASE_URL at its base_url."""
    return FakeModelServer(script, _respond)
