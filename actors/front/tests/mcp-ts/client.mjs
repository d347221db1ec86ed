// Drives `dsh mcp` with the official TypeScript MCP SDK, as a real agent client would.
//
// Usage: node client.mjs <path to dsh>. Prints one JSON line: the checks that passed and the pids of
// every process it started (the Rust test checks they are all gone). Any failed check throws.

import { mkdtempSync, readFileSync, realpathSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  CallToolResultSchema,
  LoggingMessageNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import AjvModule from "ajv";

const Ajv = AjvModule.default ?? AjvModule;
const dsh = process.argv[2];
const checks = [];
const pids = [];
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function pidAlive(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

async function main() {
  // A directory the test reads a command's pid from: a writable root for the commands, whose own
  // `/tmp` is private.
  const dir = realpathSync(mkdtempSync(join(tmpdir(), "dsh-ts-")));
  const transport = new StdioClientTransport({
    command: dsh,
    args: ["mcp", "--grace-ms", "300", "--progress-interval-ms", "250", "--writable-root", dir],
    stderr: "inherit",
  });
  const client = new Client({ name: "dsh-ts-test", version: "1.0.0" }, { capabilities: {} });
  const logs = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    logs.push(n.params.data);
  });
  await client.connect(transport);

  // list: every tool has a title, annotations and an output schema, compiled here with ajv.
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name), ["bash", "bash_output", "bash_write", "bash_kill"]);
  const ajv = new Ajv({ strict: false, allErrors: true });
  const validators = {};
  for (const tool of tools) {
    assert.ok(tool.title, `${tool.name} has a title`);
    assert.ok(tool.outputSchema, `${tool.name} has an output schema`);
    validators[tool.name] = ajv.compile(tool.outputSchema);
  }
  assert.equal(tools[0].annotations.destructiveHint, true);
  assert.equal(tools[1].annotations.readOnlyHint, true);
  assert.equal(tools[3].annotations.idempotentHint, true);
  checks.push("list");

  // Notices appended to results after the first text block, whichever result they rode on.
  const appended = [];
  const call = async (name, args, options) => {
    const result = await client.callTool({ name, arguments: args }, CallToolResultSchema, options);
    appended.push(...result.content.slice(1).map((c) => c.text));
    if (!result.isError) {
      const validate = validators[name];
      assert.ok(validate(result.structuredContent), JSON.stringify(validate.errors));
    }
    return result;
  };

  // call: the text is what the model sees; the structured content carries the same facts.
  const fg = await call("bash", { command: "echo hi; exit 3", description: "fail on purpose" });
  assert.equal(fg.content[0].text, "hi\n[exit code: 3]");
  assert.equal(fg.structuredContent.exit_code, 3);
  assert.equal(fg.structuredContent.stdout.bytes, 3);
  checks.push("call_structured");

  // background: start, poll to completion, then kill a second one.
  const started = await call("bash", {
    command: "echo $$; sleep 0.3; echo bg-done",
    description: "background job",
    run_in_background: true,
  });
  const task = started.structuredContent.task_id;
  assert.equal(started.content[0].text, `started background task ${task}`);
  let output = "";
  let status = "running";
  for (let i = 0; i < 400 && status === "running"; i++) {
    const read = await call("bash_output", { task_id: task });
    output += read.structuredContent.output;
    status = read.structuredContent.status;
    if (status === "running") await sleep(25);
  }
  assert.equal(status, "completed");
  assert.match(output, /bg-done/);
  pids.push(Number(output.split("\n")[0]));
  const sleeper = await call("bash", {
    command: "echo $$; exec sleep 300",
    description: "sleep in the background",
    run_in_background: true,
  });
  const sleeperTask = sleeper.structuredContent.task_id;
  let first = "";
  for (let i = 0; i < 400 && !/^\d+\n/.test(first); i++) {
    first += (await call("bash_output", { task_id: sleeperTask })).structuredContent.output;
    await sleep(25);
  }
  pids.push(Number(first.split("\n")[0]));
  const killed = await call("bash_kill", { task_id: sleeperTask });
  assert.equal(killed.structuredContent.outcome, "killed");
  checks.push("background");

  // notice: the first task's completion arrives as a log message and in a later result.
  for (let i = 0; i < 400 && logs.length === 0; i++) await sleep(25);
  assert.ok(logs.some((l) => String(l).includes(task)), JSON.stringify(logs));
  await call("bash", { command: "true", description: "anything" });
  assert.ok(appended.some((t) => t.includes(`${task} finished`)), JSON.stringify(appended));
  checks.push("notice");

  // progress: a 3 s command outlives a 1 s request timeout only because progress resets it.
  const progress = [];
  const slow = await call(
    "bash",
    { command: "echo working; sleep 3; echo finished", description: "slow" },
    { timeout: 1000, resetTimeoutOnProgress: true, onprogress: (p) => progress.push(p) },
  );
  assert.equal(slow.content[0].text, "working\nfinished\n");
  assert.ok(progress.length >= 3, JSON.stringify(progress));
  assert.ok(progress.every((p, i) => i === 0 || p.progress > progress[i - 1].progress));
  assert.ok(progress.some((p) => p.message === "8 bytes so far; last line: working"));
  await assert.rejects(
    call("bash", { command: "sleep 3", description: "slow" }, { timeout: 1000 }),
    /timed out/i,
    "without resetTimeoutOnProgress the same call times out",
  );
  checks.push("progress");

  // cancel: abort a running call once its progress shows it started; its process is killed.
  const controller = new AbortController();
  const cancelled = call(
    "bash",
    { command: `echo $$ > ${dir}/pid; sleep 300`, description: "to be cancelled" },
    {
      signal: controller.signal,
      onprogress: () => controller.abort("enough"),
    },
  );
  await assert.rejects(cancelled);
  const pid = Number(readFileSync(`${dir}/pid`, "utf8").trim());
  pids.push(pid);
  for (let i = 0; i < 400 && pidAlive(pid); i++) await sleep(25);
  assert.ok(!pidAlive(pid), "the cancelled command was killed");
  checks.push("cancel");

  await client.close();
  console.log(JSON.stringify({ checks, pids }));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
