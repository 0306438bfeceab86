// The official MCP TypeScript client signing in with its own OAuth machinery, as a native
// (CLI) client does: an `OAuthClientProvider` keeping its client information and tokens in
// a file, a loopback redirect URI served by this script, `UnauthorizedError` on the first
// connect, then `transport.finishAuth(code)` and a second connect. Discovery (from the
// 401), dynamic registration, PKCE, the code exchange and refresh are all the SDK's.
//   node mcp_oauth.mjs <mcp url> <state file> '<[{"name": ..., "arguments": {...}}] as JSON>'
// Prints, one JSON object a line:
//   {"authorize": "<url>"}  when the SDK sends the user to sign in: a browser (the test)
//                           opens it, and the consent's redirect lands on this script;
//   then {"tools": [...names], "results": [...CallToolResult or {"error"}], "requests":
//   [{method, url, status, form}], "authorized": bool} or {"error": "<message>"}.
import { createServer } from "node:http";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, stateFile, callsJson] = process.argv.slice(2);
const calls = JSON.parse(callsJson || "[]");
const say = (message) => process.stdout.write(JSON.stringify(message) + "\n");
setTimeout(() => {
  say({ error: "timed out" });
  process.exit(1);
}, 60_000).unref();

// -- the client's persisted state (client information, tokens, PKCE verifier) -----------
const state = existsSync(stateFile) ? JSON.parse(readFileSync(stateFile, "utf8")) : {};
const save = () => writeFileSync(stateFile, JSON.stringify(state, null, 2));

// -- the loopback redirect URI (RFC 8252 §7.3), on the same port as when registered -----
let landed;
const codeArrives = new Promise((resolve, reject) => (landed = { resolve, reject }));
const callback = createServer((request, response) => {
  const query = new URL(request.url, "http://127.0.0.1").searchParams;
  if (query.get("state") !== state.state) {
    response.writeHead(400).end("Unexpected state.");
    landed.reject(new Error(`state mismatch: ${query.get("state")}`));
  } else if (query.get("error")) {
    response.writeHead(200).end("Sign-in refused.");
    landed.reject(new Error(`authorization refused: ${query.get("error")}`));
  } else {
    response.writeHead(200).end("Signed in: you can close this window.");
    landed.resolve(query.get("code"));
  }
});
await new Promise((resolve) => callback.listen(state.port ?? 0, "127.0.0.1", resolve));
state.port = callback.address().port;
save();
const redirectUrl = `http://127.0.0.1:${state.port}/callback`;

class FileProvider {
  get redirectUrl() {
    return redirectUrl;
  }
  get clientMetadata() {
    return {
      client_name: "TypeScript SDK test client",
      redirect_uris: [redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  state() {
    state.state = randomBytes(16).toString("hex");
    save();
    return state.state;
  }
  clientInformation() {
    return state.client;
  }
  saveClientInformation(info) {
    state.client = info;
    save();
  }
  tokens() {
    return state.tokens;
  }
  saveTokens(tokens) {
    state.tokens = tokens;
    save();
  }
  redirectToAuthorization(authorizationUrl) {
    say({ authorize: authorizationUrl.href });
  }
  saveCodeVerifier(verifier) {
    state.verifier = verifier;
    save();
  }
  codeVerifier() {
    return state.verifier;
  }
  invalidateCredentials(scope) {
    if (scope === "all" || scope === "client") delete state.client;
    if (scope === "all" || scope === "tokens") delete state.tokens;
    if (scope === "all" || scope === "verifier") delete state.verifier;
    save();
  }
}

// -- every request the SDK makes (MCP and OAuth alike), for the test to check ------------
const requests = [];
const logged = async (input, init = {}) => {
  const response = await fetch(input, init);
  const entry = { method: init.method ?? "GET", url: String(input), status: response.status };
  if (init.body instanceof URLSearchParams) entry.form = Object.fromEntries(init.body);
  else if (typeof init.body === "string" && String(input).includes("/oauth/"))
    entry.json = JSON.parse(init.body);
  requests.push(entry);
  return response;
};

const provider = new FileProvider();
const transport = () =>
  new StreamableHTTPClientTransport(new URL(url), { authProvider: provider, fetch: logged });

let client = new Client({ name: "ts-oauth-test-client", version: "1.0.0" });
let authorized = false;
try {
  const first = transport();
  try {
    await client.connect(first);
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
    await first.finishAuth(await codeArrives); // the SDK exchanges the code (with PKCE)
    authorized = true;
    client = new Client({ name: "ts-oauth-test-client", version: "1.0.0" });
    await client.connect(transport());
  }
  const { tools } = await client.listTools();
  const results = [];
  for (const { name, arguments: args } of calls) {
    try {
      results.push(await client.callTool({ name, arguments: args ?? {} }));
    } catch (error) {
      results.push({ error: String(error?.message ?? error) });
    }
  }
  say({ tools: tools.map((t) => t.name), results, requests, authorized });
} catch (error) {
  say({ error: `${error?.constructor?.name}: ${error?.message ?? error}`, requests });
} finally {
  await client.close().catch(() => {});
  callback.close();
}
