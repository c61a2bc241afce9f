// An MCP server over stdio, hand-written JSON-RPC in plain node (no SDK),
// that misbehaves on request. Tools: `hello` and `pid` answer at once;
// `stall` blocks the whole process (a synchronous wait: no cancellation
// can reach it); `die` exits mid-call; `spawn` starts a child and a
// detached grandchild (a session of its own) and answers their pids;
// `garble` writes a line that is not JSON-RPC, then answers.
// Options: `--slow-start FILE` blocks, before reading anything, for the
// milliseconds FILE holds when it exists (a slow start, in one world only);
// `--garbage` writes a banner to stdout first; `--exit` exits at once;
// `--needs FILE` exits at once unless FILE exists (a server that wants
// its workspace set up, as a git server wants a repository).
"use strict";
const childProcess = require("child_process");
const fs = require("fs");
const readline = require("readline");

const options = process.argv.slice(2);

function block(milliseconds) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, milliseconds);
}

const slow = options.indexOf("--slow-start");
if (slow >= 0 && fs.existsSync(options[slow + 1])) {
  block(Number(fs.readFileSync(options[slow + 1], "utf8")));
}
const needs = options.indexOf("--needs");
if (needs >= 0 && !fs.existsSync(options[needs + 1])) {
  process.stderr.write("no " + options[needs + 1] + "\n");
  process.exit(2);
}
if (options.includes("--exit")) {
  process.stderr.write("bad config\nline two\n");
  process.exit(3);
}
if (options.includes("--garbage")) {
  process.stderr.write("starting up\n");
  process.stdout.write("Server ready on stdio, listening...\n");
}

const READ = { readOnlyHint: true, openWorldHint: false };
const TOOLS = [
  ["hello", { name: { type: "string" } }],
  ["pid", {}],
  ["stall", { seconds: { type: "number" } }],
  ["die", { code: { type: "integer" } }],
  ["spawn", {}],
  ["garble", {}],
].map(([name, properties]) => ({
  name,
  description: "The " + name + " tool.",
  inputSchema: { type: "object", properties },
  annotations: READ,
}));

function write(message) {
  process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...message }) + "\n");
}

function call(name, args) {
  switch (name) {
    case "hello":
      return "hello " + args.name;
    case "pid":
      return String(process.pid);
    case "stall":
      block(args.seconds * 1000);
      return "late";
    case "die":
      process.stderr.write("dying with " + args.code + "\n");
      process.exit(args.code);
      return "";
    case "spawn": {
      const child = childProcess.spawn("sleep", ["300"], { stdio: "ignore" });
      const grandchild = childProcess.execFileSync(
        "setsid", ["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], { encoding: "utf8" });
      return JSON.stringify([child.pid, Number(grandchild.trim())]);
    }
    case "garble":
      process.stdout.write("this is not JSON-RPC\n");
      return "garbled";
    default:
      throw new Error("unknown tool " + name);
  }
}

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  let message;
  try { message = JSON.parse(line); } catch (_) { return; }
  const { id, method, params } = message;
  if (id === undefined) return; // notifications, notifications/cancelled included
  if (method === "initialize") {
    write({ id, result: {
      protocolVersion: params.protocolVersion,
      capabilities: { tools: {} },
      serverInfo: { name: "misbehaving-js", version: "1.0.0" },
    } });
  } else if (method === "ping") {
    write({ id, result: {} });
  } else if (method === "tools/list") {
    write({ id, result: { tools: TOOLS } });
  } else if (method === "tools/call") {
    try {
      const text = call(params.name, params.arguments || {});
      write({ id, result: { content: [{ type: "text", text }], isError: false } });
    } catch (error) {
      write({ id, result: { content: [{ type: "text", text: String(error.message) }], isError: true } });
    }
  } else {
    write({ id, error: { code: -32601, message: "no method " + method } });
  }
});
