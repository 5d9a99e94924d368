#!/usr/bin/env node
// A client on the official TypeScript MCP SDK that answers a served call's
// approval (elicitation/create), run by the MCP approval tests against
// tinyagents' MCP server over Streamable HTTP:
//
//   node elicit.mjs <url> <plan>
//
// <plan> is JSON:
//
//   { "elicitation": true,            // declare the capability (default true)
//     "calls": [ { "tool": "refund", "arguments": {...},
//                  "answer": "approve" | "deny" | "decline" | "cancel",
//                  "replay": "twice" | "previous",   // optional
//                  "progress": true } ],             // optional
//     "replayAfter": true }           // optional
//
// Replays go through the SDK's transport as raw JSON-RPC responses:
// "twice" sends the answer once more under the same request id (before
// the SDK sends it); "previous" first sends every earlier answer again
// (their old ids, each an approval) and waits 300 ms before answering;
// "replayAfter" sends every answer again once the calls are done.
//
// It prints one JSON object per line: {"step":"call",...} for each call
// with the elicitation requests it saw and the result, then
// {"step":"done"}, and exits 0; an unexpected exception prints
// {"step":"error",...} and exits 1. The Rust test makes the assertions.

import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const nodeModules =
  process.env.TINYAGENTS_MCP_NODE_MODULES ??
  path.resolve(here, "../../../.tools/mcp/node_modules");
const sdk = (file) =>
  import(
    pathToFileURL(path.join(nodeModules, "@modelcontextprotocol/sdk/dist/esm", file)).href
  );

const emit = (object) => process.stdout.write(JSON.stringify(object) + "\n");
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const ANSWERS = {
  approve: { action: "accept", content: { approve: true } },
  deny: { action: "accept", content: { approve: false, reason: "not today" } },
  decline: { action: "decline" },
  cancel: { action: "cancel" },
};
const APPROVAL = { action: "accept", content: { approve: true } };

let during = "connect";
try {
  const [url, planText] = process.argv.slice(2);
  if (url === undefined || planText === undefined) {
    throw new Error("usage: node elicit.mjs <url> <plan JSON>");
  }
  const plan = JSON.parse(planText);
  const { Client } = await sdk("client/index.js");
  const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
  const { ElicitRequestSchema } = await sdk("types.js");
  const transport = new StreamableHTTPClientTransport(new URL(url));
  const capabilities = plan.elicitation === false ? {} : { elicitation: {} };
  const client = new Client({ name: "tinyagents-elicit-client", version: "0" }, { capabilities });

  // The call being made, and every answer sent so far (for replays).
  let current = null;
  const answered = [];
  const sendRaw = (id, result) => transport.send({ jsonrpc: "2.0", id, result });
  if (plan.elicitation !== false) {
    client.setRequestHandler(ElicitRequestSchema, async (request, extra) => {
      const call = current;
      call.elicitations.push({
        id: extra.requestId,
        message: request.params.message,
        mode: request.params.mode ?? null,
        requestedSchema: request.params.requestedSchema,
        meta: request.params._meta ?? null,
      });
      const answer = ANSWERS[call.plan.answer];
      if (answer === undefined) throw new Error(`unknown answer ${call.plan.answer}`);
      if (call.plan.replay === "previous") {
        for (const old of answered) await sendRaw(old.id, APPROVAL);
        await sleep(300);
      }
      if (call.plan.replay === "twice") {
        await sendRaw(extra.requestId, answer);
      }
      answered.push({ id: extra.requestId });
      return answer;
    });
  }
  await client.connect(transport);

  for (const [index, step] of plan.calls.entries()) {
    during = `call ${index}`;
    current = { plan: step, elicitations: [] };
    const progress = [];
    const options = step.progress
      ? { onprogress: ({ progress: done, total, message }) => progress.push({ progress: done, total, message }) }
      : undefined;
    const result = await client.callTool(
      { name: step.tool, arguments: step.arguments ?? {} },
      undefined,
      options,
    );
    if (step.progress) await sleep(100);
    emit({
      step: "call",
      index,
      elicitations: current.elicitations,
      content: result.content,
      isError: result.isError ?? false,
      meta: result._meta ?? null,
      progress,
    });
  }

  if (plan.replayAfter) {
    during = "replay after";
    for (const old of answered) await sendRaw(old.id, APPROVAL);
    await sleep(300);
  }

  during = "close";
  emit({ step: "done" });
  await transport.terminateSession().catch(() => {});
  await client.close();
  process.exit(0);
} catch (error) {
  emit({ step: "error", during, message: String(error?.message ?? error) });
  process.exit(1);
}
