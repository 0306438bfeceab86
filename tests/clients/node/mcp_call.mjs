// The official MCP TypeScript client, as an integrator would use it: connect over
// streamable HTTP with a bearer key, list the tools, call one.
//   node mcp_call.mjs <url> <key> <tool> '<arguments as JSON>'
// Prints {"tools": [...names], "result": <the CallToolResult>} or {"error": "<message>",
// "code": <its HTTP status, if any>} (an exception the client threw, e.g. structured content
// not matching the output schema, or a 401).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, key, tool, args] = process.argv.slice(2);
const client = new Client({ name: "ts-test-client", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${key}` } },
});
try {
  await client.connect(transport);
  const { tools } = await client.listTools();
  const result = await client.callTool({ name: tool, arguments: JSON.parse(args || "{}") });
  console.log(JSON.stringify({ tools: tools.map((t) => t.name), result }));
} catch (error) {
  const message = String(error && error.message ? error.message : error);
  console.log(JSON.stringify({ error: message, code: error?.code }));
} finally {
  await client.close().catch(() => {});
}
