// Drives `dsh serve` with the official TypeScript MCP SDK over Streamable HTTP, with a bearer token.
//
// Usage: node http_client.mjs <URL of /mcp> <token> <marker>. Lists the tools, runs a foreground
// call, starts a background task (carrying <marker> in its command line) and reads it back on a second
// connection of the same identity; prints one JSON line: the checks that passed and the task's id.

import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token, marker] = process.argv.slice(2);
const checks = [];

async function connect() {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "dsh-ts-http-test", version: "1.0.0" }, { capabilities: {} });
  await client.connect(transport);
  return { client, transport };
}

async function main() {
  const first = await connect();
  const tools = await first.client.listTools();
  assert.deepEqual(
    tools.tools.map((t) => t.name),
    ["bash", "bash_output", "bash_write", "bash_kill"],
  );
  checks.push("list");
  const echo = await first.client.callTool({
    name: "bash",
    arguments: { command: 'echo "over http as $DSH_SESSION_ID"', description: "echo" },
  });
  assert.equal(echo.content[0].text, "over http as alice\n");
  assert.equal(echo.structuredContent.exit_code, 0);
  checks.push("call");
  const started = await first.client.callTool({
    name: "bash",
    arguments: {
      command: `echo ready; sleep 300; echo ${marker}`,
      description: "background",
      run_in_background: true,
    },
  });
  const task = started.content[0].text.match(/started background task (\S+)/)[1];
  checks.push("background");
  await first.transport.terminateSession();
  await first.client.close();
  const second = await connect();
  const read = await second.client.callTool({
    name: "bash_output",
    arguments: { task_id: task, wait: true, until: "ready", timeout_ms: 30000 },
  });
  assert.match(read.content[0].text, /ready/);
  checks.push("reconnect");
  await second.client.close();
  console.log(JSON.stringify({ checks, task }));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
