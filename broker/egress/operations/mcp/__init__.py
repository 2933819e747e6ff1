"""``operations.mcp``: tool-level limits on MCP servers over streamable HTTP.

An ``operations`` kind of its own (``docs/architecture.md``, "A new
operations kind"): the entry of one server (``model``: tools, argument
globs, resource URIs, prompts), read strictly (``parsing``), narrowed by a
manifest (``narrowing``), and the decision on each request (``check``: the
JSON-RPC messages of a POST, read by ``jsonrpc``), with the rewrite of the
answers to its list requests (``answers``). Standard library only, and the
operations' own words (``decision``, ``segments``, ``jsonbody``).
"""

from __future__ import annotations

from broker.egress.operations.mcp.model import McpOperations

__all__ = ["McpOperations"]
