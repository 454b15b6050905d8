#!/usr/bin/env node
// vectors.mjs: checks this client's msgpack and JSON forms against the
// shared test vectors (testdata/vectors, generated from the Go codec), so
// that the JavaScript client, the Go codec and the Rust crate cannot drift
// apart: aggregates, deltas, chunks, v3 reports and stats views are
// encoded and decoded here with @msgpack/msgpack and compared byte for
// byte; every report vector is sent to a worker and its answer compared
// with the vector's; every stats view is built on a worker from its nodes'
// reports and read back, byte for byte; every stored node value is written
// to a JetStream worker's bucket and read back through the stats view.
//
//   node vectors.mjs VECTORS_DIR NATS_URL PREFIX STATS_PREFIX STORE_PREFIX
//
// Three workers serve NATS_URL: on PREFIX a memory-backed one run with
// --max-flows set to the max_flows of reports.json and reports_v3.json; on
// STATS_PREFIX a memory-backed one with the default flags; on STORE_PREFIX
// one run with --kv jetstream on the default bucket (flow_state), alone on
// it. It prints one line per check and a last line "N passed, N failed",
// and exits 1 if a check failed, 2 on bad usage or when it cannot connect.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Empty } from "nats";
import { Checker, hex, watchdog } from "./checker.mjs";
import { Client, H_ERROR, H_ERROR_CODE, REQUEST_TIMEOUT, StaleReportError, ascendingRanges, header } from "./client.mjs";
import {
  Entries,
  FIELDS,
  canonicalMsgpack,
  decodeAggregate,
  decodeDelta,
  decodeStats,
  emptyStats,
  encodeReport,
  encodeStats,
  mergeStats,
  pack,
  serdeJSON,
  shortest,
  show,
  state,
  statsIds,
  statsJSON,
} from "./wire.mjs";

const RUN_TIMEOUT = 120_000;

const [dir, url, prefix, statsPrefix, storePrefix, ...extra] = process.argv.slice(2);
if (!dir || !url || !prefix || !statsPrefix || !storePrefix || extra.length > 0) {
  console.error("usage: node vectors.mjs VECTORS_DIR NATS_URL PREFIX STATS_PREFIX STORE_PREFIX");
  process.exit(2);
}
watchdog(RUN_TIMEOUT);

const unhex = (s) => Uint8Array.from(Buffer.from(s, "hex"));
const load = (name) => JSON.parse(readFileSync(join(dir, name), "utf8"));

/** The vector fields of a flow, in the order of FIELDS. */
const VFIELDS = ["state_size", "last_exec_time", "start_time"];

/** stateOf turns a vector's flows into a FlowStateValue. */
function stateOf(flows) {
  const maps = VFIELDS.map((f) => new Map(flows.filter((x) => x[f] !== undefined).map((x) => [x.id, BigInt(x[f])])));
  return state(...maps);
}

/** healthOf turns a vector's health into a report's v3 fields (see encodeReport), each undefined when absent. */
function healthOf(h = {}) {
  return {
    processedRows: h.processed_rows && new Map(h.processed_rows.map((x) => [x.id, BigInt(x.rows)])),
    lastErrors: h.last_errors && new Map(h.last_errors.map((x) => [x.id, x.errors.map((e) => ({ time: BigInt(e.time), message: e.message }))])),
    seq: h.seq === undefined ? undefined : BigInt(h.seq),
  };
}

/** viewOf is a stats vector's view: its flows, and its merged processed_rows and last_errors. */
function viewOf(c) {
  const errs = (list) => list.map((e) => ({ time: BigInt(e.time), node_id: BigInt(e.node_id), message: e.message }));
  return {
    ...stateOf(c.flows),
    processed_rows: new Map(c.processed_rows.map((x) => [x.id, BigInt(x.rows)])),
    last_errors: new Map(c.last_errors.map((x) => [x.id, errs(x.errors)])),
  };
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

const checker = new Checker();
const check = (name, fn) => checker.check(name, fn);

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

const reportsV3 = load("reports_v3.json");
await check(`reports v3: the canonical ones of ${reportsV3.cases.length} vectors encode byte for byte`, () => {
  let n = 0;
  for (const c of reportsV3.cases.filter((x) => x.canonical)) {
    const a = c.accepted;
    const r = { node: BigInt(a.node_id), nodeEpoch: a.node_epoch && BigInt(a.node_epoch), value: stateOf(a.flows), ...healthOf(a.health) };
    assert.equal(hex(encodeReport(r)), c.msgpack, c.name);
    n++;
  }
  assert.ok(n > 0, "no canonical report");
  return `${n} canonical`;
});

const stats = load("stats.json").cases;
await check(`stats: ${stats.length} views decode, and re-serialise to their JSON and msgpack byte for byte; each is the merge of its nodes`, () => {
  for (const c of stats) {
    const view = decodeStats(unhex(c.msgpack));
    assert.equal(statsJSON(view), c.json, `${c.name}: the decoded view's JSON`);
    assert.equal(hex(encodeStats(view)), c.msgpack, `${c.name}: the decoded view's msgpack`);
    assert.equal(statsJSON(viewOf(c)), c.json, `${c.name}: the vector's view`);
    const merged = mergeStats(stateOf(c.flows), c.nodes.map((x) => [BigInt(x.node_id), healthOf(x.health)]));
    assert.equal(statsJSON(merged), c.json, `${c.name}: the merge of its nodes`);
  }
});

const statsChunks = stats.filter((c) => c.chunks);
await check(`stats: ${statsChunks.length} chunked views join into their view, each chunk canonical and within its budget`, () => {
  assert.ok(statsChunks.length > 0, "no chunked view");
  for (const c of statsChunks) {
    assert.ok(c.chunks.length > 1, `${c.name}: ${c.chunks.length} chunk(s)`);
    const parts = c.chunks.map((body, i) => {
      const what = `${c.name}: chunk ${i + 1}/${c.chunks.length}`;
      assert.ok(body.length / 2 <= c.budget, `${what}: ${body.length / 2} bytes, budget ${c.budget}`);
      const v = decodeStats(unhex(body));
      assert.equal(hex(encodeStats(v)), body, `${what}: not canonical`);
      return v;
    });
    ascendingRanges(parts.map(statsIds));
    const joined = emptyStats();
    for (const p of parts) for (const [f, m] of Object.entries(p)) for (const [id, v] of m) joined[f].set(id, v);
    assert.equal(statsJSON(joined), c.json, `${c.name}: joined`);
  }
});

const stored = load("stored_values.json").cases;
await check(`stored values: ${stored.length} values read as GreptimeDB's FlowStateValue, the valid ones as their flows`, () => {
  assert.ok(stored.some((c) => !c.valid) && stored.some((c) => c.valid), "valid and invalid values");
  for (const c of stored) {
    const v = JSON.parse(c.json);
    for (const f of FIELDS) {
      assert.ok(v[f] !== null && typeof v[f] === "object" && !Array.isArray(v[f]), `${c.name}: ${f} is not a map`);
      for (const [k, x] of Object.entries(v[f])) assert.ok(/^(0|[1-9][0-9]*)$/.test(k) && Number.isSafeInteger(x), `${c.name}: ${f}[${k}] = ${x}`);
    }
    if (c.valid) assert.equal(show(state(v.state_size, v.last_exec_time_map, v.start_time_map)), show(stateOf(c.flows ?? [])), c.name);
  }
});

const nc = await checker.connect(url, { name: "flowstate-js-vectors", maxReconnectAttempts: 0 });

/** answer sends a vector's report as a request and requires the vector's answer; it returns whether it was rejected. */
async function answer(p, c) {
  const m = await nc.request(`${p}.heartbeat.${c.node}`, unhex(c.msgpack), { timeout: REQUEST_TIMEOUT });
  if (c.rejected) {
    assert.equal(header(m, H_ERROR_CODE), String(c.rejected.code), `${c.name}: code`);
    assert.equal(header(m, H_ERROR), c.rejected.error, `${c.name}: reason`);
    return true;
  }
  assert.equal(header(m, H_ERROR_CODE), "", `${c.name}: rejected: ${header(m, H_ERROR)}`);
  return false;
}

await check(`reports: the worker (--max-flows ${reports.max_flows}) answers each of ${reports.cases.length} vectors as the vector says`, async () => {
  const get = async () => {
    const m = await nc.request(`${prefix}.state.get`, Empty, { timeout: REQUEST_TIMEOUT });
    assert.equal(header(m, H_ERROR_CODE), "", `get: ${header(m, H_ERROR)}`);
    return hex(m.data);
  };
  for (const c of reports.cases) {
    if (await answer(prefix, c)) continue;
    assert.equal(await get(), hex(canonicalMsgpack(stateOf(c.accepted.flows))), `${c.name}: the aggregate holds the report's flows`);
    // An empty report takes the node's flows out again, so the next case starts from the empty aggregate.
    const r = await nc.request(`${prefix}.heartbeat.${c.node}`, canonicalReport(c.node, undefined, state()), { timeout: REQUEST_TIMEOUT });
    assert.equal(header(r, H_ERROR_CODE), "", `${c.name}: empty report: ${header(r, H_ERROR)}`);
  }
});

// Unnumbered clients send every report as given: an empty report that
// takes a vector's flows out again carries no node_epoch.
const plain = new Client(nc, prefix, { numbered: false });
await check(
  `reports v3: the worker (--max-flows ${reportsV3.max_flows}) answers each of ${reportsV3.cases.length} vectors as the vector says, the stats view holds the accepted ones, and a numbered one sent again is stale`,
  async () => {
    assert.equal(reportsV3.max_flows, reports.max_flows, "the v3 reports are judged with the --max-flows of reports.json");
    let stale = 0;
    for (const c of reportsV3.cases) {
      if (await answer(prefix, c)) continue;
      const a = c.accepted;
      const want = mergeStats(stateOf(a.flows), [[BigInt(a.node_id), healthOf(a.health)]]);
      const got = await plain.getStats();
      assert.equal(statsJSON(got.view), statsJSON(want), `${c.name}: the stats view holds the report`);
      assert.equal(hex(got.bodies[0]), hex(encodeStats(want)), `${c.name}: the stats view's msgpack`);
      const json = await plain.getStatsJSON();
      assert.equal(new TextDecoder().decode(json.body), statsJSON(want), `${c.name}: the stats view's JSON`);
      if (a.node_epoch !== undefined && a.health.seq !== undefined) {
        // A report numbered like the one the state holds is stale: 409, naming both.
        const m = await nc.request(`${prefix}.heartbeat.${c.node}`, unhex(c.msgpack), { timeout: REQUEST_TIMEOUT });
        assert.equal(header(m, H_ERROR_CODE), "409", `${c.name} sent again: code`);
        const both = `node_epoch ${a.node_epoch} seq ${a.health.seq}`;
        assert.equal(header(m, H_ERROR), `stale report of node ${a.node_id}: ${both}, the state holds ${both}`, `${c.name} sent again: reason`);
        assert.equal((await plain.getStats()).revision, got.revision, `${c.name} sent again: the state did not change`);
        stale++;
      }
      await plain.send({ node: BigInt(a.node_id) });
    }
    assert.ok(stale > 0, "no numbered vector");
    return `${stale} numbered ones stale when sent again`;
  },
);

const statsClient = new Client(nc, statsPrefix, { numbered: false });
await check(`stats: a worker given the reports of each of ${stats.length} views' nodes answers the view byte for byte, in msgpack and JSON`, async () => {
  for (const c of stats) {
    // The flows come in a report of a node of their own: no node of the
    // vector carries them, and a node without errors does not show.
    const carrier = 1n + c.nodes.reduce((m, x) => (BigInt(x.node_id) > m ? BigInt(x.node_id) : m), 0n);
    const reports = [{ node: carrier, value: stateOf(c.flows) }, ...c.nodes.map((x) => ({ node: BigInt(x.node_id), ...healthOf(x.health) }))];
    for (const r of reports) await statsClient.send(r);
    const got = await statsClient.getStats();
    assert.equal(got.chunks, 1, `${c.name}: chunks of a small view`);
    assert.equal(hex(got.bodies[0]), c.msgpack, `${c.name}: msgpack`);
    const json = await statsClient.getStatsJSON();
    assert.equal(new TextDecoder().decode(json.body), c.json, `${c.name}: JSON`);
    assert.equal(json.revision, got.revision, `${c.name}: both views of one state`);
    for (const r of reports) await statsClient.send({ node: r.node });
    assert.equal(statsJSON((await statsClient.getStats()).view), statsJSON(emptyStats()), `${c.name}: the empty reports emptied the state`);
  }
});

const STORE_NODE = 500; // stored value i is written for node STORE_NODE + i
await check(`stored values: a JetStream worker applies each of ${stored.length} values written to its bucket as the vector says, seen through the stats view`, async () => {
  const kv = await nc.jetstream().views.kv("flow_state", { bindOnly: true });
  const c3 = new Client(nc, storePrefix, { numbered: false });
  let stale = 0;
  for (const [i, c] of stored.entries()) {
    const node = BigInt(STORE_NODE + i);
    const key = `__flow/state/node/${node}`;
    await kv.put(key, new TextEncoder().encode(c.json));
    // A get passes the worker's read barrier: it sees every write before it.
    const got = await c3.getStats();
    const h = healthOf(c.health);
    const want = c.valid ? mergeStats(stateOf(c.flows ?? []), [[node, h]]) : emptyStats();
    assert.equal(statsJSON(got.view), statsJSON(want), `${c.name}: the stats view ${c.valid ? "holds the value" : "lacks the node: an invalid value is no value"}`);
    if (c.valid && c.node_epoch !== undefined && h.seq !== undefined) {
      // The stored process numbering: its seq again is stale, as is any report of a process the node moved away from.
      const processes = [[BigInt(c.node_epoch), h.seq], ...(c.health.retired_epochs ?? []).map((e) => [BigInt(e), 1n])];
      for (const [nodeEpoch, seq] of processes) {
        const err = await c3.send({ node, nodeEpoch, seq }).then(
          () => assert.fail(`${c.name}: a report of node_epoch ${nodeEpoch} seq ${seq} was applied`),
          (e) => e,
        );
        assert.ok(err instanceof StaleReportError && err.code === 409, `${c.name}: node_epoch ${nodeEpoch} seq ${seq}: ${err}`);
        assert.match(err.reason, new RegExp(`node_epoch ${nodeEpoch} seq ${seq}\\b.*node_epoch ${c.node_epoch} seq ${h.seq}\\b`), `${c.name}: the reason names both`);
        stale++;
      }
      assert.equal((await c3.getStats()).revision, got.revision, `${c.name}: the stale reports changed nothing`);
    }
    await kv.delete(key);
    assert.equal(statsJSON((await c3.getStats()).view), statsJSON(emptyStats()), `${c.name}: a deleted key is an absent node`);
  }
  return `${stale} stale reports of stored processes`;
});

await checker.finish(nc);
