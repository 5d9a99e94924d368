#!/usr/bin/env node
// A deliberately misbehaving MCP server over stdio, for the MCP client's
// failure tests. No SDK: raw newline-delimited JSON-RPC 2.0 on stdin/stdout.
//
//   node broken.mjs <mode>
//
// It answers `initialize` (echoing the client's protocolVersion) and
// `tools/list` (tools `echo` and `fail`) properly, then misbehaves by mode:
//
//   normal      behaves: `echo` returns its `text`, `fail` returns isError
//   crash       exits with status 3 on the first tools/call
//   hang        never answers tools/call (stays alive)
//   junk        writes garbage lines before each tools/call answer
//   oversize    answers tools/call with one ~20 MB line
//   bad_schema  tools/list also has `broken_schema`, an invalid JSON Schema
//   changing    after the first tools/call answer, sends
//               notifications/tools/list_changed; later lists omit `fail`
//   paged       tools/list in two pages: [echo] (nextCursor "2"), [fail]
//
// With BROKEN_LOG set, it appends to that file one line per message
// received: `call <method>` (request), `notify <method>` (notification),
// and for notifications/cancelled also `cancelled <requestId>`. It exits
// when stdin closes.

import fs from "node:fs";
import readline from "node:readline";

const MODES = ["normal", "crash", "hang", "junk", "oversize", "bad_schema", "changing", "paged"];
const mode = process.argv[2];
if (!MODES.includes(mode)) {
  process.stderr.write(`usage: node broken.mjs <${MODES.join("|")}>\n`);
  process.exit(2);
}
process.stderr.write(`broken: mode ${mode}\n`);

const logFile = process.env.BROKEN_LOG;
const log = (line) => {
  if (logFile) fs.appendFileSync(logFile, line + "\n");
};
// Writes go out whole and in order (a big one may be queued, see below).
const writeLine = (line) => process.stdout.write(line + "\n");
const send = (message) => writeLine(JSON.stringify({ jsonrpc: "2.0", ...message }));
const reply = (id, result) => send({ id, result });
const replyError = (id, code, message) => send({ id, error: { code, message } });

const ECHO = {
  name: "echo",
  description: "Returns its text.",
  inputSchema: { type: "object", properties: { text: { type: "string" } } },
};
const FAIL = {
  name: "fail",
  description: "Always fails (isError).",
  inputSchema: { type: "object", properties: {} },
};
const BROKEN_SCHEMA = {
  name: "broken_schema",
  description: "Its input schema does not compile.",
  inputSchema: { type: "object", properties: { x: { type: 12 } } },
};

let listChanged = false; // mode changing: sent notifications/tools/list_changed

function listTools(id, params) {
  if (mode === "paged") {
    const cursor = params?.cursor;
    if (cursor === undefined) return reply(id, { tools: [ECHO], nextCursor: "2" });
    if (cursor === "2") return reply(id, { tools: [FAIL] });
    return replyError(id, -32602, `unknown cursor ${JSON.stringify(cursor)}`);
  }
  const tools = [ECHO];
  if (!(mode === "changing" && listChanged)) tools.push(FAIL);
  if (mode === "bad_schema") tools.push(BROKEN_SCHEMA);
  reply(id, { tools });
}

// The well-behaved answer to a tools/call.
function callTool(id, params) {
  const name = params?.name;
  if (name === "echo") {
    const text = params.arguments?.text;
    return reply(id, { content: [{ type: "text", text: typeof text === "string" ? text : "" }] });
  }
  if (name === "fail") {
    return reply(id, { content: [{ type: "text", text: "it failed" }], isError: true });
  }
  if (name === "broken_schema" && mode === "bad_schema") {
    return reply(id, { content: [{ type: "text", text: "called broken_schema" }] });
  }
  replyError(id, -32602, `unknown tool ${JSON.stringify(name)}`);
}

function onToolsCall(id, params) {
  switch (mode) {
    case "crash":
      process.exit(3);
      break;
    case "hang":
      return; // never answers
    case "junk":
      writeLine("this line is not JSON");
      writeLine(JSON.stringify({ hello: "world", note: "JSON, but not JSON-RPC" }));
      send({ id: 987654321, result: { content: [] } }); // a response to no request
      return callTool(id, params);
    case "oversize": {
      const text = "x".repeat(20 * 1024 * 1024);
      return reply(id, { content: [{ type: "text", text }] });
    }
    case "changing":
      callTool(id, params);
      if (!listChanged) {
        listChanged = true;
        send({ method: "notifications/tools/list_changed" });
      }
      return;
    default:
      return callTool(id, params);
  }
}

function onMessage(message) {
  const { id, method, params } = message;
  const isRequest = id !== undefined && id !== null;
  if (typeof method !== "string") {
    log(`response ${JSON.stringify(id)}`); // we send no requests: unexpected
    return;
  }
  log(`${isRequest ? "call" : "notify"} ${method}`);
  if (!isRequest) {
    if (method === "notifications/cancelled") log(`cancelled ${params?.requestId}`);
    return; // notifications/initialized and the rest: ignored
  }
  switch (method) {
    case "initialize":
      return reply(id, {
        protocolVersion: params?.protocolVersion ?? "2025-06-18",
        capabilities: { tools: { listChanged: true } },
        serverInfo: { name: "broken", version: "0" },
      });
    case "ping":
      return reply(id, {});
    case "tools/list":
      return listTools(id, params);
    case "tools/call":
      return onToolsCall(id, params);
    default:
      return replyError(id, -32601, `method not found: ${method}`);
  }
}

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  if (line.trim() === "") return;
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    log("unparsable line");
    return replyError(null, -32700, "parse error");
  }
  onMessage(message);
});
// Exit once what is written has gone out (a big line can still be queued).
lines.on("close", () => process.stdout.write("", () => process.exit(0)));
