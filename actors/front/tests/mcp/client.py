"""Drives `dsh mcp` with the official Python MCP client, as a real agent client would.

Usage: client.py <path to dsh>. Prints one JSON object: the checks that passed and the pids of every
process it started (the Rust test checks they are all gone). Any failed check raises.
"""

import json
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(result, index=0):
    return result.content[index].text


async def poll(session, task_id, needle, timeout=20.0):
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        result = await session.call_tool("bash_output", {"task_id": task_id})
        assert not result.is_error, text(result)
        seen += text(result) + "\n"
        if needle in seen:
            return seen
        await anyio.sleep(0.05)
    raise AssertionError(f"{needle!r} never appeared for {task_id}: {seen!r}")


async def first_pid(session, task_id, timeout=20.0):
    """Polls a task that starts with `echo $$` until its pid line has been read."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = await session.call_tool("bash_output", {"task_id": task_id})
        first = text(result).splitlines()[0]
        if first.isdigit():
            return int(first)
        await anyio.sleep(0.05)
    raise AssertionError(f"no pid from {task_id}")


def pid_alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


async def main(binary):
    logs = []

    async def on_log(params):
        logs.append(params.data)

    checks = []
    pids = []
    workdir = Path(tempfile.mkdtemp())
    # The test reads a command's pid file here: a writable root, since the commands' /tmp is private.
    server = StdioServerParameters(
        command=binary, args=["mcp", "--grace-ms", "300", "--writable-root", str(workdir.resolve())]
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()

            tools = await session.list_tools()
            names = [tool.name for tool in tools.tools]
            assert names == ["bash", "bash_output", "bash_write", "bash_kill"], names
            bash = tools.tools[0]
            assert bash.input_schema["required"] == ["command", "description"], bash.input_schema
            assert "run_in_background" in bash.input_schema["properties"]
            checks.append("list_tools")

            result = await session.call_tool("bash", {"command": "echo hello; exit 3", "description": "Print and fail"})
            assert not result.is_error and text(result) == "hello\n[exit code: 3]", result
            checks.append("foreground")

            result = await session.call_tool("bash", {"command": 5, "description": "Bad"})
            assert result.is_error and text(result).startswith('Error: invalid arguments: "command" must be a string'), result
            checks.append("validation")

            result = await session.call_tool("bash", {"command": "echo $DSH_SESSION_ID", "description": "Session"})
            assert text(result).startswith("mcp-"), result
            checks.append("session_id")

            result = await session.call_tool(
                "bash", {"command": "echo $$; echo bg-ok", "description": "Background", "run_in_background": True}
            )
            assert text(result) == "started background task bash-1", result
            deadline = time.monotonic() + 20
            notice = "background bash task bash-1 finished [status: completed, exit code: 0]. Read its output with bash_output."
            while notice not in logs:
                assert time.monotonic() < deadline, f"no log notification; logs={logs!r}"
                await anyio.sleep(0.05)
            checks.append("notice_logged")

            # The notice is also appended, once, to the session's next tool result.
            result = await session.call_tool("bash_output", {"task_id": "bash-1"})
            assert len(result.content) == 2, result
            assert text(result, 1) == notice, result
            lines = text(result).splitlines()
            pids.append(int(lines[0]))
            assert lines[1:] == ["bg-ok", "[status: completed, exit code: 0]"], lines
            result = await session.call_tool("bash_output", {"task_id": "bash-1"})
            assert len(result.content) == 1 and text(result) == "(no new output)\n[status: completed, exit code: 0]", result
            checks.append("notice_appended")

            result = await session.call_tool(
                "bash", {"command": "echo $$; exec sleep 60", "description": "Sleep", "run_in_background": True}
            )
            assert text(result) == "started background task bash-2", result
            pids.append(await first_pid(session, "bash-2"))
            result = await session.call_tool("bash_kill", {"task_id": "bash-2"})
            assert text(result) == "killed background task bash-2", result
            await poll(session, "bash-2", "[status: killed by SIGTERM]")
            result = await session.call_tool("bash_output", {"task_id": "bash-404"})
            assert result.is_error and text(result) == 'Error: unknown bash task "bash-404"', result
            checks.append("background_kill")

            # Cancelling the request aborts the foreground command: its process group dies.
            pidfile = workdir / "fg.pid"
            with anyio.move_on_after(1.5):
                await session.call_tool(
                    "bash", {"command": f"echo $$ > {pidfile}; exec sleep 60", "description": "Cancelled"}
                )
                raise AssertionError("the call was not cancelled")
            fg_pid = int(pidfile.read_text())
            pids.append(fg_pid)
            deadline = time.monotonic() + 20
            while pid_alive(fg_pid):
                assert time.monotonic() < deadline, "the cancelled command still runs"
                await anyio.sleep(0.05)
            result = await session.call_tool("bash", {"command": "echo after-cancel", "description": "Still serving"})
            assert text(result) == "after-cancel\n", result
            checks.append("cancel")

            # A background task still running when the client disconnects is killed by the server.
            result = await session.call_tool(
                "bash", {"command": "echo $$; exec sleep 60", "description": "Left running", "run_in_background": True}
            )
            pids.append(await first_pid(session, "bash-3"))

    print(json.dumps({"checks": checks, "pids": pids}))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
