// A minimal MCP server over stdio, hand-written JSON-RPC (no SDK): notes
// under the root given as argv[2], confined by realpath and opened without
// following a last link.
"use strict";
const fs = require("fs");
const path = require("path");
const readline = require("readline");

const ROOT = fs.realpathSync(process.argv[2]);
// The twin with a planted confinement bug: the path joined to the root as
// given, and opened following links.
const LEAKY = process.argv.includes("--leaky");

const TOOLS = [
  {
    name: "read_note",
    description: "Read a note.",
    inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
    annotations: { readOnlyHint: true, openWorldHint: false },
  },
  {
    name: "write_note",
    description: "Write a note.",
    inputSchema: {
      type: "object",
      properties: { path: { type: "string" }, text: { type: "string" } },
      required: ["path", "text"],
    },
    annotations: { destructiveHint: false, openWorldHint: false, idempotentHint: true },
  },
];

function inside(relative) {
  if (LEAKY) return path.join(ROOT, String(relative));
  if (typeof relative !== "string" || relative.startsWith("/")) throw new Error("not a relative path");
  const joined = path.resolve(ROOT, relative);
  const parent = fs.realpathSync(path.dirname(joined));
  if (parent !== ROOT && !parent.startsWith(ROOT + path.sep)) throw new Error(relative + " leads outside the notes");
  return path.join(parent, path.basename(joined));
}

function call(name, args) {
  if (name === "read_note") {
    const nofollow = LEAKY ? 0 : fs.constants.O_NOFOLLOW;
    const fd = fs.openSync(inside(args.path), fs.constants.O_RDONLY | nofollow);
    try { return fs.readFileSync(fd, "utf8"); } finally { fs.closeSync(fd); }
  }
  if (name === "write_note") {
    const target = inside(args.path);
    const temporary = path.join(path.dirname(target), "." + path.basename(target) + ".part");
    try {
      const fd = fs.openSync(temporary, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o644);
      try { fs.writeSync(fd, args.text); fs.fsyncSync(fd); } finally { fs.closeSync(fd); }
      fs.renameSync(temporary, target);
    } catch (error) {
      try { fs.unlinkSync(temporary); } catch (_) {}
      throw error;
    }
    return "wrote " + Buffer.byteLength(args.text) + " bytes";
  }
  throw new Error("unknown tool " + name);
}

function answer(id, result) {
  process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id, result }) + "\n");
}

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  let message;
  try { message = JSON.parse(line); } catch (_) { return; }
  const { id, method, params } = message;
  if (id === undefined) return; // notifications
  if (method === "initialize") {
    answer(id, {
      protocolVersion: params.protocolVersion,
      capabilities: { tools: {} },
      serverInfo: { name: "files-js", version: "1.0.0" },
    });
  } else if (method === "ping") {
    answer(id, {});
  } else if (method === "tools/list") {
    answer(id, { tools: TOOLS });
  } else if (method === "tools/call") {
    try {
      answer(id, { content: [{ type: "text", text: call(params.name, params.arguments || {}) }], isError: false });
    } catch (error) {
      answer(id, { content: [{ type: "text", text: String(error.message) }], isError: true });
    }
  } else {
    process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id, error: { code: -32601, message: "Method not found" } }) + "\n");
  }
});
