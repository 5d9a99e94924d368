#!/usr/bin/env node
// A payments MCP server over stdio for the command line's crash and fleet
// tests. No SDK, no packages: newline-delimited JSON-RPC 2.0 on
// stdin/stdout, so it runs on a bare Node.js.
//
//   node payments.mjs
//
// Tools:
//   pay {to}      appends one line `to` to the file PAYMENTS_FILE names
//                 (flushed to disk before it answers), waiting PAY_DELAY_MS
//                 (default 200) before the write and as long after it, so a
//                 kill can land before or after the effect. No annotations:
//                 the client reads it as destructive, never replayed.
//   lookup {to}   answers `found <to>` (read-only, idempotent).
//
// It exits when stdin closes.

import fs from "node:fs";
import readline from "node:readline";

const delay = Number(process.env.PAY_DELAY_MS ?? "200");
const file = process.env.PAYMENTS_FILE;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const send = (message) => process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...message }) + "\n");
const reply = (id, result) => send({ id, result });
const replyError = (id, code, message) => send({ id, error: { code, message } });
const text = (id, body, isError = false) => reply(id, { content: [{ type: "text", text: body }], isError });

const TO = { type: "object", properties: { to: { type: "string" } }, required: ["to"] };
const TOOLS = [
  { name: "pay", description: "Pays someone (once).", inputSchema: TO },
  {
    name: "lookup",
    description: "Looks someone up.",
    inputSchema: TO,
    annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
  },
];

async function pay(id, to) {
  if (!file) return text(id, "PAYMENTS_FILE is not set", true);
  await sleep(delay);
  const fd = fs.openSync(file, "a");
  fs.writeSync(fd, `${to}\n`);
  fs.fsyncSync(fd);
  fs.closeSync(fd);
  await sleep(delay);
  text(id, `paid ${to}`);
}

function onMessage({ id, method, params }) {
  const isRequest = id !== undefined && id !== null;
  if (typeof method !== "string" || !isRequest) return;
  switch (method) {
    case "initialize":
      return reply(id, {
        protocolVersion: params?.protocolVersion ?? "2025-06-18",
        capabilities: { tools: {} },
        serverInfo: { name: "payments", version: "0" },
      });
    case "ping":
      return reply(id, {});
    case "tools/list":
      return reply(id, { tools: TOOLS });
    case "tools/call": {
      const to = params?.arguments?.to;
      if (typeof to !== "string") return text(id, "`to` must be a string", true);
      if (params.name === "pay") return void pay(id, to);
      if (params.name === "lookup") return text(id, `found ${to}`);
      return replyError(id, -32602, `unknown tool ${JSON.stringify(params.name)}`);
    }
    default:
      return replyError(id, -32601, `method not found: ${method}`);
  }
}

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  if (line.trim() === "") return;
  try {
    onMessage(JSON.parse(line));
  } catch {
    replyError(null, -32700, "parse error");
  }
});
lines.on("close", () => process.stdout.write("", () => process.exit(0)));
