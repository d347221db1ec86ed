"""Drives `dsh mcp` with the official Python client's default `Client` (`mode="auto"`), which
negotiates protocol 2026-07-28 and answers the server's input rounds itself.

Usage: rounds.py <path to dsh> <first root> <second root> <sandboxed: 0 or 1>. Prints one JSON
object: the checks that passed. Any failed check raises.
"""

import json
import sys
from pathlib import Path

import anyio
import mcp.types as types
from mcp import StdioServerParameters
from mcp.client.client import Client


async def main(binary, first, second, sandboxed):
    checks = []
    roots = {"current": first}
    answers = []

    async def list_roots(context):
        return types.ListRootsResult(roots=[types.Root(uri=Path(roots["current"]).as_uri())])

    async def elicit(context, params):
        action = answers.pop(0)
        content = {"approve": True} if action == "accept" else None
        return types.ElicitResult(action=action, content=content)

    args = ["mcp", "--grace-ms", "300"]
    if sandboxed:
        args += ["--sandbox", "read-only"]
    server = StdioServerParameters(command=binary, args=args)
    async with Client(server, list_roots_callback=list_roots, elicitation_callback=elicit) as client:
        assert client.protocol_version == "2026-07-28", client.protocol_version

        result = await client.call_tool("bash", {"command": "pwd", "description": "Where"})
        assert result.content[0].text == f"{first}\n", result
        checks.append("roots")

        roots["current"] = second
        await client.send_roots_list_changed()
        result = await client.call_tool("bash", {"command": "pwd", "description": "Where now"})
        assert result.content[0].text == f"{second}\n", result
        checks.append("roots_changed")

        if sandboxed:
            expected = {
                "accept": "(no output)",
                "decline": 'Error: the user rejected escalating this command to "workspace-write"',
                "cancel": 'Error: approval for escalating to "workspace-write" was cancelled',
            }
            for action, text in expected.items():
                answers.append(action)
                result = await client.call_tool(
                    "bash",
                    {
                        "command": f"echo once >> {action}",
                        "description": "Escalate",
                        "sandbox_permissions": "workspace-write",
                        "justification": "it writes a file",
                    },
                )
                assert result.content[0].text == text, result
                written = Path(second, action)
                if action == "accept":
                    assert written.read_text() == "once\n", written
                else:
                    assert not written.exists(), written
                checks.append(f"escalation_{action}")

    print(json.dumps({"checks": checks}))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1")
