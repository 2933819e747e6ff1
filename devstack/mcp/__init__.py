"""MCP servers of the local stack (the official ``mcp`` SDK's): ``server``, a GitHub-shaped one behind TLS."""
