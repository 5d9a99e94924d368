#!/usr/bin/env node
// A scenario client on the official TypeScript MCP SDK, run by the MCP
// interop tests against tinyagents' MCP server:
//
//   node client.mjs stdio <command> [args...]
//   node client.mjs http <url>
//
// It prints one JSON object per line on stdout for each step and exits 0
// once the scenario ran; the Rust test reading the lines makes the
// assertions. An unexpected exception prints {"step":"error",...} and
// exits 1. The SDK is the one `cargo xtask ci tests` installs into
// <repo>/.tools/mcp (TINYAGENTS_MCP_NODE_MODULES overrides node_modules).

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
const text = (result) =>
  result.content
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("\n");

let during = "connect";
try {
  const [mode, ...rest] = process.argv.slice(2);
  const { Client } = await sdk("client/index.js");
  let transport;
  if (mode === "stdio" && rest.length > 0) {
    const { StdioClientTransport } = await sdk("client/stdio.js");
    // The SDK passes only a few variables (HOME, PATH, ...) to the child by
    // default: hand it our whole environment, and our stderr.
    transport = new StdioClientTransport({
      command: rest[0],
      args: rest.slice(1),
      env: { ...process.env },
      stderr: "inherit",
    });
  } else if (mode === "http" && rest.length === 1) {
    const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
    transport = new StreamableHTTPClientTransport(new URL(rest[0]));
  } else {
    throw new Error("usage: node client.mjs stdio <command> [args...] | http <url>");
  }

  const client = new Client({ name: "tinyagents-interop-client", version: "0" });
  // The SDK reports a progress notification it has no handler for (one that
  // arrives after its request settled) to onerror: count those.
  let strayProgress = 0;
  client.onerror = (error) => {
    if (String(error?.message).includes("progress notification for an unknown token")) {
      strayProgress += 1;
    }
  };
  await client.connect(transport);

  during = "tools";
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor });
    for (const tool of page.tools) {
      tools.push({
        name: tool.name,
        annotations: tool.annotations ?? null,
        inputSchema: tool.inputSchema,
      });
    }
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  emit({ step: "tools", tools });

  during = "answer";
  const answer = await client.callTool({
    name: "assistant",
    arguments: { query: "What is 2+2?" },
  });
  emit({ step: "answer", content: answer.content, isError: answer.isError ?? false });

  during = "conversation";
  const first = await client.callTool({
    name: "assistant",
    arguments: { query: "first", conversation: "c1" },
  });
  const second = await client.callTool({
    name: "assistant",
    arguments: { query: "second", conversation: "c1" },
  });
  emit({ step: "conversation", first: text(first), second: text(second) });

  during = "progress";
  // With onprogress the SDK puts a progressToken in the request's _meta.
  const progress = [];
  const strayBefore = strayProgress;
  const slow = await client.callTool({ name: "slow_steps", arguments: { steps: 3 } }, undefined, {
    onprogress: ({ progress: done, total, message }) => progress.push({ progress: done, total, message }),
  });
  await sleep(100);
  emit({
    step: "progress",
    progress,
    // Notifications the SDK dropped because the result overtook them: it
    // handles a notification a microtask late, so one written right before
    // the result (in the same read) arrives after the request settled.
    late: strayProgress - strayBefore,
    content: slow.content,
    isError: slow.isError ?? false,
  });

  during = "cancel";
  // Abort after the first progress notification: the SDK rejects the call
  // at once and sends notifications/cancelled to the server.
  const controller = new AbortController();
  let progressBeforeCancel = 0;
  let error = null;
  let strayAtCancel = strayProgress;
  try {
    await client.callTool({ name: "slow_steps", arguments: { steps: 200 } }, undefined, {
      signal: controller.signal,
      onprogress: () => {
        progressBeforeCancel += 1;
        if (progressBeforeCancel === 1) {
          strayAtCancel = strayProgress;
          controller.abort("cancelled by the client");
        }
      },
    });
  } catch (rejection) {
    error = String(rejection?.message ?? rejection);
  }
  // Progress still arriving afterwards means the server went on (one may
  // have been in flight when the cancellation was sent).
  await sleep(300);
  emit({
    step: "cancel",
    error,
    progressBeforeCancel,
    progressAfterCancel: strayProgress - strayAtCancel,
  });

  during = "close";
  emit({ step: "done" });
  if (mode === "http") {
    await transport.terminateSession().catch(() => {});
  }
  // For stdio this ends the child's stdin, then SIGTERM/SIGKILL after 2 s.
  await client.close();
  process.exit(0);
} catch (error) {
  emit({ step: "error", during, message: String(error?.message ?? error) });
  process.exit(1);
}
