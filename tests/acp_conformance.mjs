// Validates recorded ACP traffic against the zod schemas that ship with the published
// @agentclientprotocol/sdk (stable v1, and its unstable part for methods only it has): what the
// SDK itself accepts. Each message is also checked against the JSON Schema files of the same
// package (ajv, formats not checked), which are stricter: the zod schemas fall back to a
// default for some malformed optional fields where the JSON Schema refuses them.
//
// Input (stdin): one JSON object per line, {"to": "agent" | "client", "message": <JSON-RPC>},
// in the order the messages crossed the wire. "to" is the side that received the message.
// Responses are matched to their request by id and direction, so each is checked against
// the response type of its method. Output (stdout): one JSON object, {checked, failures,
// unknown, methods}: every message that did not validate (with the first issues), the
// messages of methods neither schema defines ("<method> <kind> to <side>"), and the count
// of each method and kind seen.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";

const nodeModules = process.argv[2];
if (!nodeModules) {
  process.stderr.write("usage: acp_conformance.mjs <node_modules dir>\n");
  process.exit(2);
}
const sdk = path.join(nodeModules, "@agentclientprotocol", "sdk");
const load = (rel) => import(pathToFileURL(path.join(sdk, rel)).href);
const stable = await load("dist/v1/schema/zod.gen.js");
const unstable = await load("dist/v1/unstable/schema/zod.gen.js");
const version = createRequire(import.meta.url)(path.join(sdk, "package.json")).version;

// method -> {request, response, notification}: the type names the JSON Schema files give
// (x-method), for the zod schema of the same name (z + name).
function methodTypes(file) {
  const defs = JSON.parse(readFileSync(path.join(sdk, "schema", "v1", file), "utf8")).$defs;
  const table = new Map();
  for (const [name, def] of Object.entries(defs)) {
    const method = def["x-method"];
    if (!method) continue;
    const kind = name.endsWith("Request") ? "request"
      : name.endsWith("Response") ? "response"
      : name.endsWith("Notification") ? "notification" : null;
    if (!kind) continue;
    const entry = table.get(method) ?? {};
    entry[kind] = name;
    table.set(method, entry);
  }
  return table;
}
const stableTypes = methodTypes("schema.json");
const unstableTypes = methodTypes("schema.unstable.json");

const Ajv2020 = (await import(pathToFileURL(path.join(nodeModules, "ajv", "dist", "2020.js")).href)).default;
function jsonSchema(file) {
  const ajv = new Ajv2020({ strict: false, validateFormats: false, logger: false });
  ajv.addSchema(JSON.parse(readFileSync(path.join(sdk, "schema", "v1", file), "utf8")), "acp");
  return (name) => ajv.getSchema(`acp#/$defs/${name}`);
}
const jsonSchemas = { stable: jsonSchema("schema.json"), unstable: jsonSchema("schema.unstable.json") };

function schemaFor(method, kind) {
  const inStable = stableTypes.get(method)?.[kind];
  if (inStable) return { name: inStable, zod: stable["z" + inStable], part: "stable" };
  const inUnstable = unstableTypes.get(method)?.[kind];
  if (inUnstable) return { name: inUnstable, zod: unstable["z" + inUnstable], part: "unstable" };
  return null;
}

const lines = readFileSync(0, "utf8").split("\n").filter((l) => l.trim());
const pending = new Map(); // `${to}:${id}` -> method
const failures = [];
const unknown = new Set();
const methods = {};
let checked = 0;

function check(entry, method, kind, value) {
  const schema = schemaFor(method, kind);
  if (schema) schema.json = jsonSchemas[schema.part](schema.name);
  methods[`${method} ${kind}`] = (methods[`${method} ${kind}`] ?? 0) + 1;
  if (!schema || !schema.zod) {
    unknown.add(`${method} ${kind} to ${entry.to}`);
    return;
  }
  checked += 1;
  // A request or notification without params is checked as an empty object (as the SDK does).
  const result = schema.zod.safeParse(value ?? {});
  if (!result.success) {
    failures.push({
      to: entry.to, method, kind, type: schema.name, part: schema.part, validator: "zod",
      issues: result.error.issues.slice(0, 5), message: entry.message,
    });
  }
  if (schema.json && !schema.json(value ?? {})) {
    failures.push({
      to: entry.to, method, kind, type: schema.name, part: schema.part,
      validator: "json-schema", issues: schema.json.errors.slice(0, 5), message: entry.message,
    });
  }
}

for (const line of lines) {
  const entry = JSON.parse(line);
  const message = entry.message;
  if (typeof message?.method === "string") {
    if ("id" in message) {
      pending.set(`${entry.to}:${JSON.stringify(message.id)}`, message.method);
      check(entry, message.method, "request", message.params);
    } else {
      check(entry, message.method, "notification", message.params);
    }
    continue;
  }
  // A response travels the other way from its request.
  const from = entry.to === "agent" ? "client" : "agent";
  const key = `${from}:${JSON.stringify(message?.id)}`;
  const method = pending.get(key);
  pending.delete(key);
  if (method === undefined) {
    failures.push({ to: entry.to, kind: "response", issues: ["answers no request"], message });
    continue;
  }
  if ("error" in message) {
    checked += 1;
    const result = stable.zError.safeParse(message.error);
    if (!result.success) {
      failures.push({ to: entry.to, method, kind: "error", type: "Error", part: "stable",
        validator: "zod", issues: result.error.issues.slice(0, 5), message });
    }
    const errorSchema = jsonSchemas.stable("Error");
    if (!errorSchema(message.error)) {
      failures.push({ to: entry.to, method, kind: "error", type: "Error", part: "stable",
        validator: "json-schema", issues: errorSchema.errors.slice(0, 5), message });
    }
    methods[`${method} error`] = (methods[`${method} error`] ?? 0) + 1;
    continue;
  }
  check(entry, method, "response", message.result);
}

process.stdout.write(JSON.stringify({
  sdk: version, checked, failures, unknown: [...unknown].sort(), methods,
}) + "\n");
