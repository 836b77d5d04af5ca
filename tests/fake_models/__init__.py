"""Scripted stand-ins for model services, so the real agent CLIs (Claude Code, Codex) can be
driven through a fixed sequence of MCP tool calls without any model: a fake Anthropic Messages
API and a fake OpenAI Responses API, both on 127.0.0.1 only."""
