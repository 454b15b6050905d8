#!/usr/bin/env node
// vectors.mjs: checks this client's msgpack and JSON forms against the
// shared test vectors (testdata/vectors, generated from the Go codec), so
// that the JavaScript client, the Go codec and the Rust crate cannot drift
// apart: aggregates, deltas and chunks are encoded and decoded here with
// @msgpack/msgpack and compared byte for byte; every report vector is sent
// to a worker and its answer compared with the vector's.
//
//   node vectors.mjs VECTORS_DIR NATS_URL PREFIX
//
// The worker must be memory-backed and run with --max-flows set to the
// max_flows of reports.json. It prints one line per check and a last line
// "N passed, N failed", and exits 1 if a check failed, 2 on bad usage or
// when it cannot connect.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Empty, connect } from "nats";
import { H_ERROR, H_ERROR_CODE, REQUEST_TIMEOUT, header } from "./client.mjs";
import { Entries, FIELDS, canonicalMsgpack, decodeAggregate, decodeDelta, pack, serdeJSON, shortest, show, state } from "./wire.mjs";

const RUN_TIMEOUT = 120_000;

const [dir, url, prefix, ...extra] = process.argv.slice(2);
if (!dir || !url || !prefix || extra.length > 0) {
  console.error("usage: node vectors.mjs VECTORS_DIR NATS_URL PREFIX");
  process.exit(2);
}
setTimeout(() => {
  console.log(`FAIL run: not finished within ${RUN_TIMEOUT} ms`);
  process.exit(1);
}, RUN_TIMEOUT).unref();

const hex = (b) => Buffer.from(b).toString("hex");
const unhex = (s) => Uint8Array.from(Buffer.from(s, "hex"));
const load = (name) => JSON.parse(readFileSync(join(dir, name), "utf8"));

/** The vector fields of a flow, in the order of FIELDS. */
const VFIELDS = ["state_size", "last_exec_time", "start_time"];

/** stateOf turns a vector's flows into a FlowStateValue. */
function stateOf(flows) {
  const maps = VFIELDS.map((f) => new Map(flows.filter((x) => x[f] !== undefined).map((x) => [x.id, BigInt(x[f])])));
  return state(...maps);
}

/** canonicalReport writes a report as PROTOCOL.md's encoders do: node_id, node_epoch when set, the three maps with integer ids. */
function canonicalReport(nodeID, nodeEpoch, s) {
  const pairs = [["node_id", shortest(BigInt(nodeID))]];
  if (nodeEpoch !== undefined) pairs.push(["node_epoch", shortest(BigInt(nodeEpoch))]);
  for (const f of FIELDS) pairs.push([f, new Entries([...s[f]].map(([k, v]) => [k, shortest(v)]))]);
  return pack(new Entries(pairs));
}

/** canonicalDelta writes a delta body: base, then each flow's [size, last, start] with nil for a missing field. */
function canonicalDelta(base, flows) {
  const entries = flows.map((x) => [x.id, VFIELDS.map((f) => (x[f] === undefined ? null : shortest(BigInt(x[f]))))]);
  return pack(new Entries([["base", shortest(BigInt(base))], ["flows", new Entries(entries)]]));
}

let passed = 0;
let failed = 0;
async function check(name, fn) {
  try {
    const note = await fn();
    passed++;
    console.log(`ok   ${name}${note ? ` # ${note}` : ""}`);
  } catch (err) {
    failed++;
    console.log(`FAIL ${name}: ${String(err instanceof Error ? err.message : err).replace(/\s*\n\s*/g, " ")}`);
  }
}

const aggregates = load("aggregates.json").cases;
await check(`aggregates: ${aggregates.length} vectors encode and decode byte for byte`, () => {
  for (const c of aggregates) {
    const s = stateOf(c.flows);
    assert.equal(hex(canonicalMsgpack(s)), c.msgpack, `${c.name}: msgpack`);
    assert.equal(serdeJSON(s), c.json, `${c.name}: JSON`);
    assert.equal(show(decodeAggregate(unhex(c.msgpack))), show(s), `${c.name}: decoded`);
  }
});

const deltas = load("deltas.json").cases;
await check(`deltas: ${deltas.length} vectors encode and decode byte for byte`, () => {
  for (const c of deltas) {
    assert.equal(hex(canonicalDelta(c.base, c.flows)), c.msgpack, `${c.name}: msgpack`);
    const d = decodeDelta(unhex(c.msgpack));
    assert.equal(d.base, BigInt(c.base), `${c.name}: base`);
    const want = c.flows.map((x) => [x.id, VFIELDS.map((f) => (x[f] === undefined ? "nil" : String(BigInt(x[f]))))]);
    const got = d.flows.map(([id, arr]) => [id, arr.map((v) => (v === null ? "nil" : String(v)))]);
    assert.deepEqual(got, want, `${c.name}: flows`);
  }
});

const chunks = load("chunks.json").cases;
await check(`chunks: ${chunks.length} vectors join into their aggregate, each chunk canonical and within its budget`, () => {
  for (const c of chunks) {
    const joined = state();
    let last = -1;
    for (const [i, body] of c.chunks.entries()) {
      const what = `${c.name}: chunk ${i + 1}/${c.chunks.length}`;
      assert.ok(body.length / 2 <= c.budget, `${what}: ${body.length / 2} bytes, budget ${c.budget}`);
      const s = decodeAggregate(unhex(body));
      assert.equal(hex(canonicalMsgpack(s)), body, `${what}: not canonical`);
      const ids = [...new Set(FIELDS.flatMap((f) => [...s[f].keys()]))].sort((a, b) => a - b);
      if (ids.length > 0) {
        assert.ok(ids[0] > last, `${what}: starts at flow ${ids[0]}, at or below ${last}`);
        last = ids.at(-1);
      }
      for (const f of FIELDS) for (const [k, v] of s[f]) joined[f].set(k, v);
    }
    assert.equal(show(state(...FIELDS.map((f) => joined[f]))), show(stateOf(c.flows)), `${c.name}: joined`);
  }
});

const reports = load("reports.json");
await check(`reports: the canonical ones of ${reports.cases.length} vectors encode byte for byte`, () => {
  let n = 0;
  for (const c of reports.cases.filter((x) => x.canonical)) {
    assert.equal(hex(canonicalReport(c.accepted.node_id, c.accepted.node_epoch, stateOf(c.accepted.flows))), c.msgpack, c.name);
    n++;
  }
  assert.ok(n > 0, "no canonical report");
  return `${n} canonical`;
});

let nc;
try {
  nc = await connect({ servers: url, name: "flowstate-js-vectors", timeout: 5000, maxReconnectAttempts: 0 });
} catch (err) {
  console.log(`FAIL connect to ${url}: ${err.message}`);
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(2);
}

await check(`reports: the worker (--max-flows ${reports.max_flows}) answers each of ${reports.cases.length} vectors as the vector says`, async () => {
  const get = async () => {
    const m = await nc.request(`${prefix}.state.get`, Empty, { timeout: REQUEST_TIMEOUT });
    assert.equal(header(m, H_ERROR_CODE), "", `get: ${header(m, H_ERROR)}`);
    return hex(m.data);
  };
  for (const c of reports.cases) {
    const m = await nc.request(`${prefix}.heartbeat.${c.node}`, unhex(c.msgpack), { timeout: REQUEST_TIMEOUT });
    if (c.rejected) {
      assert.equal(header(m, H_ERROR_CODE), String(c.rejected.code), `${c.name}: code`);
      assert.equal(header(m, H_ERROR), c.rejected.error, `${c.name}: reason`);
      continue;
    }
    assert.equal(header(m, H_ERROR_CODE), "", `${c.name}: rejected: ${header(m, H_ERROR)}`);
    assert.equal(await get(), hex(canonicalMsgpack(stateOf(c.accepted.flows))), `${c.name}: the aggregate holds the report's flows`);
    // An empty report takes the node's flows out again, so the next case starts from the empty aggregate.
    const r = await nc.request(`${prefix}.heartbeat.${c.node}`, canonicalReport(c.node, undefined, state()), { timeout: REQUEST_TIMEOUT });
    assert.equal(header(r, H_ERROR_CODE), "", `${c.name}: empty report: ${header(r, H_ERROR)}`);
  }
});

await nc.drain().catch((err) => console.log(`# drain: ${err.message}`));
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
