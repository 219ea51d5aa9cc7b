// The official TypeScript ACP SDK's two network clients, unmodified,
// against a running `mm serve`: cmd/mm/serve_node_test.go runs this with
//
//   node clients.mjs URL TOKEN WORKDIR
//
// where URL is http://HOST:PORT/acp. MM_TS_STDIO, when set, adds agents
// the SDK's stdio stream (ndJsonStream) starts as an editor does: a JSON
// object of name to {cmd, args, cwd, env} (`mm -acp`, `mm connect URL`),
// run after the network transports. For each transport it does what an
// editor does: initialize, session/new, a turn, a bash turn whose
// permission request it answers, a cancelled turn, two sessions on one
// connection, ACP's errors (-32002 for a closed session, an Invalid params
// message that says why), and session/load after a reconnect. It prints one line per
// step passed and exits 0, or prints why on stderr and exits 1.
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { join } from "node:path";

import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";

import { client, ndJsonStream } from "@agentclientprotocol/sdk";
import { createHttpStream } from "@agentclientprotocol/sdk/experimental/http-client";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";
import WebSocket from "ws";

const [url, token, workDir] = process.argv.slice(2);
if (!url || !token || !workDir) {
  console.error("usage: node clients.mjs URL TOKEN WORKDIR");
  process.exit(2);
}
const headers = { Authorization: `Bearer ${token}` };
const timeout = setTimeout(() => {
  console.error("timed out");
  process.exit(1);
}, 180_000);

// connect opens one ACP connection over transport, with a client that
// records every update and answers permission requests with "allow once".
const stdio = JSON.parse(process.env.MM_TS_STDIO ?? "{}");

// agent starts an agent of stdio's as an editor does, its stdin and
// stdout the connection; closing the connection closes its stdin, and
// exited resolves once it has exited.
function agent(name) {
  const { cmd, args, cwd, env } = stdio[name];
  const proc = spawn(cmd, args, { cwd, env: { ...process.env, ...env }, stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  proc.stderr.on("data", (b) => (stderr += b));
  const exited = new Promise((resolve) => proc.on("exit", (code) => resolve({ code, stderr })));
  return { stream: ndJsonStream(Writable.toWeb(proc.stdin), Readable.toWeb(proc.stdout)), exited, proc };
}

function connect(transport) {
  let started;
  let stream;
  if (stdio[transport]) {
    started = agent(transport);
    stream = started.stream;
  } else {
    stream =
      transport === "websocket"
        ? createWebSocketStream(url.replace(/^http/, "ws"), { WebSocket, headers })
        : createHttpStream(url, { headers });
  }
  const updates = [];
  const waiters = [];
  const permissions = [];
  const app = client({ name: "mm-serve-ts-test" })
    .onNotification("session/update", ({ params }) => {
      updates.push(params);
      for (const w of [...waiters]) {
        if (w.ok(params)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(params);
        }
      }
    })
    .onRequest("session/request_permission", ({ params }) => {
      permissions.push(params);
      const allow = params.options.find((o) => o.kind === "allow_once") ?? params.options[0];
      return { outcome: { outcome: "selected", optionId: allow.optionId } };
    });
  const conn = app.connect(stream);
  return {
    conn,
    started,
    agent: conn.agent,
    updates,
    permissions,
    // text is what the agent said in a session, so far.
    text(sessionId) {
      return updates
        .filter((n) => n.sessionId === sessionId && n.update.sessionUpdate === "agent_message_chunk")
        .map((n) => n.update.content.text ?? "")
        .join("");
    },
    // waitUpdate resolves with the first update of a session that ok accepts.
    waitUpdate(sessionId, ok) {
      const seen = updates.find((n) => n.sessionId === sessionId && ok(n));
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve) => waiters.push({ ok: (n) => n.sessionId === sessionId && ok(n), resolve }));
    },
  };
}

function prompt(c, sessionId, text) {
  return c.agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text }] });
}

async function initialize(c) {
  // The client shows boolean config options and notices (schema 1.21).
  const init = await c.agent.request("initialize", {
    protocolVersion: 1,
    clientCapabilities: { session: { configOptions: { boolean: {} }, notices: {}, compaction: {} } },
  });
  assert.equal(init.protocolVersion, 1);
  assert.ok(init.agentCapabilities?.loadSession, "mm loads sessions");
  return init;
}

async function run(transport) {
  const step = (name) => console.log(`ok ${transport} ${name}`);
  const cwd = mkdtempSync(join(workDir, `${transport}-`));
  let c = connect(transport);
  await initialize(c);
  step("initialize");

  const created = await c.agent.request("session/new", { cwd, mcpServers: [] });
  const { sessionId } = created;
  assert.ok(sessionId);
  step("session/new");

  // The sandbox's network switch, a boolean for this client.
  const net = created.configOptions.find((o) => o.id === "network");
  assert.equal(net?.type, "boolean");
  assert.equal(net.currentValue, true);
  const set = await c.agent.request("session/set_config_option", { sessionId, configId: "network", type: "boolean", value: false });
  assert.equal(set.configOptions.find((o) => o.id === "network").currentValue, false);
  assert.equal(set._meta["mm.sandbox"].network, false);
  await c.agent.request("session/set_config_option", { sessionId, configId: "network", type: "boolean", value: true });
  step("the network as a boolean option");

  let r = await prompt(c, sessionId, "ping");
  assert.equal(r.stopReason, "end_turn");
  assert.equal(c.text(sessionId), "pong");
  step("pong turn");

  r = await prompt(c, sessionId, "bash");
  assert.equal(r.stopReason, "end_turn");
  assert.equal(c.permissions.length, 1, "one permission request");
  assert.equal(c.permissions[0].sessionId, sessionId);
  assert.match(c.text(sessionId), /bash said: ran-in-bash/);
  step("bash turn with a permission answered");

  const slow = prompt(c, sessionId, "slow");
  await c.waitUpdate(sessionId, (n) => n.update.sessionUpdate === "agent_message_chunk" && n.update.content.text === "thinking");
  await c.agent.notify("session/cancel", { sessionId });
  r = await slow;
  assert.equal(r.stopReason, "cancelled");
  step("cancel");

  const second = await c.agent.request("session/new", { cwd, mcpServers: [] });
  assert.notEqual(second.sessionId, sessionId);
  const [a, b] = await Promise.all([prompt(c, sessionId, "ping"), prompt(c, second.sessionId, "ping")]);
  assert.equal(a.stopReason, "end_turn");
  assert.equal(b.stopReason, "end_turn");
  assert.equal(c.text(second.sessionId), "pong");
  step("two sessions on one connection");

  // /compact, for a client that shows compactions: compaction_update
  // updates, which the SDK's schema checks, and no text.
  r = await prompt(c, sessionId, "/compact");
  assert.equal(r.stopReason, "end_turn");
  const done = await c.waitUpdate(sessionId, (n) => n.update.sessionUpdate === "compaction_update" && n.update.status === "completed");
  assert.equal(done.update.summary[0].type, "text");
  assert.ok(c.updates.some((n) => n.sessionId === sessionId && n.update.sessionUpdate === "compaction_update" && n.update.status === "in_progress"));
  step("/compact as compaction updates");

  // ACP's errors: a closed session is -32002 with data.sessionId, which
  // makes a second close succeed in the SDK (idempotent); an Invalid
  // params error says why in its message; a folder that does not exist
  // lists no session.
  await c.agent.request("session/close", { sessionId: second.sessionId });
  await c.agent.request("session/close", { sessionId: second.sessionId });
  await assert.rejects(prompt(c, second.sessionId, "ping"), (err) => {
    assert.equal(err.code, -32002);
    assert.equal(err.data?.sessionId, second.sessionId);
    return true;
  });
  step("session/close twice, then -32002");
  await assert.rejects(c.agent.request("session/new", { cwd: "relative/dir", mcpServers: [] }), (err) => {
    assert.equal(err.code, -32602);
    assert.match(err.message, /^Invalid params: cwd "relative\/dir" is not an absolute path/);
    return true;
  });
  const listed = await c.agent.request("session/list", { cwd: join(cwd, "no-such-folder") });
  assert.deepEqual(listed.sessions, []);
  step("Invalid params says why; a missing folder lists nothing");

  await close(c);
  c = connect(transport);
  await initialize(c);
  await c.agent.request("session/load", { sessionId, cwd, mcpServers: [] });
  // Over HTTP the replay comes on the session's stream and the answer on
  // the connection's: either may be read first.
  await c.waitUpdate(sessionId, (n) => n.update.sessionUpdate === "user_message_chunk" && n.update.content.text === "ping");
  r = await prompt(c, sessionId, "ping");
  assert.equal(r.stopReason, "end_turn");
  step("session/load after a reconnect");
  await close(c);
}

// close ends a connection; a stdio agent must then exit 0.
async function close(c) {
  c.conn.close();
  await c.conn.closed;
  if (c.started) {
    c.started.proc.stdin.end();
    const { code, stderr } = await c.started.exited;
    assert.equal(code, 0, `the agent exited ${code}:\n${stderr}`);
  }
}

try {
  for (const transport of ["websocket", "http", ...Object.keys(stdio)]) {
    await run(transport);
  }
  clearTimeout(timeout);
} catch (err) {
  console.error(err?.stack ?? String(err));
  process.exit(1);
}
