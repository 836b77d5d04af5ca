"""atrex-mcp: a production-trace-driven GPU-kernel benchmark served over MCP."""

__version__ = "0.1.0"
