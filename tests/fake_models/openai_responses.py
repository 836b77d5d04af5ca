"""A fake OpenAI Responses API (POST /v1/responses, streamed) that plays a Script.

Codex sends MCP tools grouped as `{"type": "namespace", "name": "mcp__<server>", "tools": [...]}`;
a function call to one of them must echo the namespace.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.fake_models.script import FakeModelServer, Script, json_bytes, sse

USAGE_IN, USAGE_OUT = 100, 20


def _offered(tools: list[dict[str, Any]], tool: str) -> tuple[str | None, str] | None:
    for t in tools:
        if t.get("type") == "namespace":
            for inner in t.get("tools", []):
                if inner.get("name") == tool:
                    return t.get("name"), tool
        elif t.get("name") == tool or str(t.get("name", "")).endswith(f"__{tool}"):
            return None, t["name"]
    return None


def _respond(fake: FakeModelServer, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    route = path.split("?")[0].rstrip("/")
    if route.endswith("/models"):
        return 200, "application/json", json_bytes({"object": "list", "data": [], "models": []})
    if not route.endswith("/responses"):
        return 404, "application/json", json_bytes({"error": {"message": f"no route {path}"}})
    done = sum(
        1 for item in body.get("input", []) if isinstance(item, dict) and item.get("type") == "function_call_output"
    )
    step = fake.script.step(done)
    found = _offered(body.get("tools") or [], step.tool) if step else None
    if found is not None:
        namespace, name = found
        item: dict[str, Any] = {
            "type": "function_call",
            "id": "fc_" + uuid.uuid4().hex[:12],
            "call_id": "call_" + uuid.uuid4().hex[:12],
            "name": name,
            "arguments": json.dumps(step.arguments),
        }
        if namespace:
            item["namespace"] = namespace
        answer = f"tool:{step.tool}"
    else:
        text = fake.script.final_text if step is None else "ok"
        item = {
            "type": "message",
            "role": "assistant",
            "id": "msg_" + uuid.uuid4().hex[:12],
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        answer = "final" if step is None else "text"
    fake.record(path, body, answer)
    response_id = "resp_" + uuid.uuid4().hex[:12]
    usage = {
        "input_tokens": USAGE_IN,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": USAGE_OUT,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": USAGE_IN + USAGE_OUT,
    }
    events = [
        {"type": "response.created", "response": {"id": response_id}},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": {"id": response_id, "usage": usage}},
    ]
    return 200, "text/event-stream", sse(events)


def fake_responses(script: Script) -> FakeModelServer:
    """A fake Responses API for `script`; configure a Codex model provider with base_url + '/v1'."""
    return FakeModelServer(script, _respond)
