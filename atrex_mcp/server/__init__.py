"""The MCP server: app and tools, transports, the GPU queue, the typed tool results."""
