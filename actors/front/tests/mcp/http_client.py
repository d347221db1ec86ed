"""Drives `dsh serve` with the official Python client over Streamable HTTP with a bearer token.

Usage: http_client.py <URL of /mcp> <token> <its identity> <mode: legacy or auto> <root>.
`legacy` speaks the initialize handshake (2025-11-25, `Mcp-Session-Id`); `auto` negotiates
2026-07-28 (stateless requests with per-request `_meta`). Lists the tools, runs a foreground call
in the client's root (asked with `roots/list` or through an input round), starts a background task
and reads it back. Prints one JSON object: the protocol version and the checks that passed. Any
failed check raises.
"""

import json
import sys

from pathlib import Path

import anyio
import httpx2
import mcp.types as types
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client


async def main(url, token, identity, mode, root):
    checks = []

    async def list_roots(context):
        return types.ListRootsResult(roots=[types.Root(uri=Path(root).as_uri())])

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    transport = streamable_http_client(url, http_client=http)
    async with Client(transport, mode=mode, list_roots_callback=list_roots) as client:
        tools = await client.list_tools()
        assert [t.name for t in tools.tools] == ["bash", "bash_output", "bash_write", "bash_kill"], tools
        checks.append("list")

        result = await client.call_tool(
            "bash", {"command": 'echo "as $DSH_SESSION_ID in $PWD"', "description": "Who"}
        )
        assert result.content[0].text == f"as {identity} in {root}\n", result
        checks.append("call")

        started = await client.call_tool(
            "bash",
            {"command": "echo ready", "description": "Background", "run_in_background": True},
        )
        text = started.content[0].text
        assert text.startswith("started background task "), text
        task = text.split()[3]
        read = await client.call_tool(
            "bash_output", {"task_id": task, "wait": True, "timeout_ms": 30000}
        )
        assert "ready" in read.content[0].text, read
        checks.append("background")
        version = client.protocol_version
    print(json.dumps({"protocol_version": version, "checks": checks}))


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:6])
