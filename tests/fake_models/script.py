"""The fixed sequence of tool calls a fake model plays, and the loopback HTTP server both fakes
run on.

A fake is stateless about the conversation: the client resends the whole history with every
request, so the number of tool results already in it says which step comes next. A request
that does not offer the next step's tool (a side request such as a title summary) is answered
with plain text, so only the main conversation advances the script.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ToolStep:
    """One tool call the fake model makes: the MCP tool's own name and its arguments."""

    tool: str
    arguments: dict[str, Any]


@dataclass
class Script:
    steps: list[ToolStep]
    final_text: str = "Finished: the kernel is packaged."

    def step(self, done: int) -> ToolStep | None:
        return self.steps[done] if done < len(self.steps) else None


@dataclass
class Exchange:
    """One request the fake received and what it answered (for assertions)."""

    path: str
    body: dict[str, Any]
    answer: str  # "tool:<name>", "final", "text"


Responder = Callable[["FakeModelServer", str, dict[str, Any]], tuple[int, str, bytes]]


@dataclass
class FakeModelServer:
    """A ThreadingHTTPServer on 127.0.0.1 with an ephemeral port; `respond(server, path, body)`
    returns (status, content type, body bytes). Use as a context manager."""

    script: Script
    respond: Responder
    exchanges: list[Exchange] = field(default_factory=list)

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else {}
                except json.JSONDecodeError:
                    body = {}
                status, ctype, data = fake.respond(fake, self.path, body)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_POST = do_GET = _answer

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def record(self, path: str, body: dict[str, Any], answer: str) -> None:
        self.exchanges.append(Exchange(path, body, answer))

    def tool_calls(self) -> list[str]:
        return [e.answer.removeprefix("tool:") for e in self.exchanges if e.answer.startswith("tool:")]

    def __enter__(self) -> FakeModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def sse(events: list[dict[str, Any]]) -> bytes:
    """Server-sent events, one `event:`/`data:` pair per event, as both APIs stream them."""
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def json_bytes(data: Any) -> bytes:
    return json.dumps(data).encode()
