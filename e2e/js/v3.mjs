#!/usr/bin/env node
// v3.mjs: a flownode and a frontend of PROTOCOL.md v3 written from that
// page alone, in JavaScript: reports numbered by the client (node_epoch
// once per client, seq increasing), a report older than the one the state
// holds for its process answered 409, the stats view in msgpack, in JSON
// and in chunks past the max payload, an unknown view answered 400, and
// --max-error-bytes answered 507.
//
//   node v3.mjs NATS_URL PREFIX MAX_ERROR_BYTES
//
// The worker must be fresh, memory-backed and run with --max-error-bytes
// MAX_ERROR_BYTES (at least 15,000); the server's max payload must be
// between 6,500 and 12,000 bytes, so that a report of 6,000 bytes of errors
// fits and a view of 12,000 does not. Twice the script prints "# go stats"
// and reads a line "<revision> <hex>" on stdin: the caller
// (e2e/v3_jsclient_test.go) reads the stats view with the Go client and
// writes its revision and its JSON, which the script compares with its own.
// It prints one line per check and a last line "N passed, N failed", and
// exits 1 if a check failed, 2 on bad usage or when it cannot connect.

import assert from "node:assert/strict";
import { createInterface } from "node:readline";
import { decode } from "@msgpack/msgpack";
import { Empty, headers } from "nats";
import { Checker, hex, watchdog } from "./checker.mjs";
import {
  Client,
  H_ACCEPT,
  H_CHUNKS,
  H_ERROR,
  H_ERROR_CODE,
  H_VIEW,
  JSON_TYPE,
  MessageQueue,
  ServiceError,
  StaleReportError,
  VIEW_SEED,
  VIEW_STATS,
  header,
  parseVersion,
} from "./client.mjs";
import {
  MAX_ERROR_MESSAGE,
  UINT32_MAX,
  canonicalMsgpack,
  cutMessage,
  decodeAggregate,
  decodeStats,
  emptyStats,
  encodeReport,
  encodeStats,
  entries,
  merge,
  mergeStats,
  pack,
  serdeJSON,
  show,
  state,
  statsJSON,
} from "./wire.mjs";

const TIMEOUT = 10_000; // a reply, a sniffed report, the Go side's line
const RUN_TIMEOUT = 240_000;

const [url, prefix, maxErrorBytesArg, ...extra] = process.argv.slice(2);
const maxErrorBytes = Number(maxErrorBytesArg);
if (!url || !prefix || !Number.isSafeInteger(maxErrorBytes) || maxErrorBytes < 15_000 || extra.length > 0) {
  console.error("usage: node v3.mjs NATS_URL PREFIX MAX_ERROR_BYTES (at least 15000)");
  process.exit(2);
}
watchdog(RUN_TIMEOUT);

const text = (b) => new TextDecoder().decode(b);
const utf8Len = (s) => new TextEncoder().encode(s).length;

const checker = new Checker();

/**
 * check runs fn(reports) as one check, then clears the nodes it sent
 * reports of through reports, whether it passed or not, so that the next
 * check starts from the empty state.
 */
async function check(name, fn) {
  const reports = new Reports();
  await checker.check(name, () => fn(reports), () => reports.clear());
}

// The lines the caller writes on stdin.
const stdin = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

/** goStats asks the caller for the stats view as the Go client reads it: its revision and JSON. */
async function goStats() {
  console.log("# go stats");
  let timer;
  const line = await Promise.race([
    stdin.next(),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no line from the Go side within ${TIMEOUT} ms`)), TIMEOUT);
    }),
  ]).finally(() => clearTimeout(timer));
  assert.ok(!line.done, "stdin closed before the Go side answered");
  const m = /^(0|[1-9][0-9]*) ([0-9a-f]*)$/.exec(line.value.trim());
  assert.ok(m, `the Go side's line ${JSON.stringify(line.value.slice(0, 80))} is not "<revision> <hex>"`);
  return { revision: BigInt(m[1]), json: text(Buffer.from(m[2], "hex")) };
}

/** rejection runs promise, which must fail, and returns its error. */
async function rejection(promise, what) {
  return promise.then(
    () => assert.fail(`${what}: succeeded`),
    (err) => err,
  );
}

/** requireStale requires err to be the StaleReportError of a report (node_epoch, seq) against the held one. */
function requireStale(err, sent, held, what) {
  assert.ok(err instanceof StaleReportError, `${what}: ${err} is not a StaleReportError`);
  assert.ok(err instanceof ServiceError, `${what}: a StaleReportError is a ServiceError`);
  assert.equal(err.name, "StaleReportError", what);
  assert.equal(err.code, 409, what);
  for (const [e, s] of [sent, held]) {
    assert.match(err.reason, new RegExp(`node_epoch ${e} seq ${s}\\b`), `${what}: the reason names node_epoch ${e} seq ${s}`);
  }
}

/** errorsOf returns n errors of size bytes each, newest first, for flow id. */
function errorsOf(id, n, size, time = 1_700_000_000_000) {
  return Array.from({ length: n }, (_, i) => {
    const head = `flow ${id} error ${i}: `;
    return { time: time - i, message: head + "x".repeat(size - head.length) };
  });
}

/** Reports keeps the last report applied of each node, to compute the stats view they make. */
class Reports {
  constructor() {
    this.last = new Map();
  }

  async send(c, r) {
    const v = await c.send(r);
    this.last.set(BigInt(r.node), r);
    return v;
  }

  /** view is the stats view of the reports applied. */
  view() {
    const values = new Map([...this.last].map(([node, r]) => [node, r.value ?? state()]));
    return mergeStats(merge(values), this.last);
  }

  /**
   * clear sends an empty report for every node, unnumbered (applied
   * whatever the node's process), and requires the empty stats view.
   */
  async clear() {
    for (const node of this.last.keys()) await plain.send({ node });
    this.last.clear();
    assert.equal(statsJSON((await plain.getStats()).view), statsJSON(emptyStats()), "the empty reports emptied the state");
  }
}

/**
 * statsOf reads the stats view with getStats, requires each chunk in
 * canonical msgpack and within the max payload, and returns the view with
 * the bytes of its chunks.
 */
async function statsOf(c) {
  const got = await c.getStats();
  for (const [i, body] of got.bodies.entries()) {
    assert.ok(body.length < maxPayload, `chunk ${i + 1}/${got.chunks}: ${body.length} bytes, max payload ${maxPayload}`);
    assert.equal(hex(encodeStats(decodeStats(body))), hex(body), `chunk ${i + 1}/${got.chunks} is canonical`);
  }
  return { ...got, bytes: got.bodies.reduce((n, b) => n + b.length, 0) };
}

const nc = await checker.connect(url, { name: "flowstate-js-v3", maxReconnectAttempts: 0 });
const maxPayload = nc.info?.max_payload ?? 0;
console.log(`# ${url} prefix ${prefix}; node ${process.version}; max_payload ${maxPayload}; --max-error-bytes ${maxErrorBytes}`);
if (maxPayload < 6_500 || maxPayload > 12_000) checker.abort(`the server's max payload ${maxPayload} is not between 6500 and 12000`);

const c = new Client(nc, prefix);
const plain = new Client(nc, prefix, { numbered: false });

await check("reports are numbered: one node_epoch per client, seq increasing over its reports; a client made with numbered: false sends them as given", async (reports) => {
  const sniffed = new MessageQueue();
  const sub = nc.subscribe(`${prefix}.heartbeat.>`, { callback: (err, msg) => sniffed.push(err, msg) });
  await nc.flush();
  const seen = async () => {
    const msg = await sniffed.next(TIMEOUT);
    assert.ok(msg, `no report sniffed within ${TIMEOUT} ms`);
    const keys = [];
    const r = decode(msg.data, { useBigInt64: true, mapKeyConverter: (k) => (keys.push(k), k) });
    return { keys, r };
  };
  try {
    const other = new Client(nc, prefix);
    assert.ok(c.nodeEpoch > 0n && other.nodeEpoch > c.nodeEpoch, `two clients of a process, two node_epochs: ${c.nodeEpoch}, ${other.nodeEpoch}`);
    assert.ok(BigInt(Date.now()) >= c.nodeEpoch, "a node_epoch is a time in unix ms, not later than now");
    assert.equal(plain.nodeEpoch, undefined);
    const seqs = [];
    for (const node of [11, 12, 11]) {
      await reports.send(c, { node, value: state({ [node]: 1 }) });
      const { keys, r } = await seen();
      assert.equal(BigInt(r.node_epoch), c.nodeEpoch, `node ${node}: node_epoch`);
      assert.deepEqual(keys.filter((k) => typeof k === "string"), ["node_id", "node_epoch", "state_size", "last_exec_time_map", "start_time_map", "seq"], "the keys of a numbered report");
      seqs.push(BigInt(r.seq));
    }
    assert.ok(seqs[0] < seqs[1] && seqs[1] < seqs[2], `seq increases over the client's reports, whatever the node: ${seqs}`);
    await reports.send(plain, { node: 13, value: state({ 13: 1 }) });
    const { keys } = await seen();
    assert.deepEqual(keys.filter((k) => typeof k === "string"), ["node_id", "state_size", "last_exec_time_map", "start_time_map"], "an unnumbered report carries neither node_epoch nor seq");
    // A seq the caller sets in the client's epoch raises its count.
    await c.send({ node: 11, seq: c.seq + 100n });
    await seen();
    await c.send({ node: 11 });
    const { r } = await seen();
    assert.equal(BigInt(r.seq), seqs[2] + 101n, "the next seq after one set by the caller");
    return `node_epoch ${c.nodeEpoch}, seqs ${seqs.join(", ")}`;
  } finally {
    sub.unsubscribe();
  }
});

await check("a numbered report older than the one held for its process is answered 409 (StaleReportError) naming both, and changes nothing", async (reports) => {
  const node = 21;
  await reports.send(c, { node, value: state({ 1: 100 }, { 1: 1_700_000_000_000 }), processedRows: { 1: 5000 } });
  const held = c.seq;
  const before = await c.getStatsJSON();
  const seedBefore = await c.get();
  for (const seq of [held - 1n, held]) {
    const err = await rejection(c.send({ node, value: state({ 1: 999 }), processedRows: { 1: 1 }, seq }), `seq ${seq} after ${held}`);
    requireStale(err, [c.nodeEpoch, seq], [c.nodeEpoch, held], `seq ${seq} after ${held}`);
  }
  const after = await c.getStatsJSON();
  assert.equal(after.revision, before.revision, "the revision did not move");
  assert.equal(text(after.body), text(before.body), "the stats view did not change");
  const seedAfter = await c.get();
  assert.equal(hex(seedAfter.body), hex(seedBefore.body), "the seed's view did not change");
  assert.equal(text(after.body), statsJSON(reports.view()), "the stats view is the first report's");

  // Published, a stale report is dropped: the worker applies reports in
  // arrival order, so once the report of node 22 sent after it is acked,
  // the stale one has been judged.
  c.publishReport({ node, value: state({ 1: 999 }), seq: held - 1n });
  await reports.send(c, { node: 22, value: state({ 2: 1 }) });
  assert.equal(text((await c.getStatsJSON()).body), statsJSON(reports.view()), "a published stale report was dropped");

  // A new process of the node (another client) is applied whatever its
  // seq; the old process is then one the node moved away from.
  const restarted = new Client(nc, prefix);
  await reports.send(restarted, { node, value: state({ 1: 200 }), processedRows: { 1: 7 } });
  const oldNext = c.seq + 1n;
  const err = await rejection(c.send({ node, value: state({ 1: 300 }) }), "the old process after the new one");
  requireStale(err, [c.nodeEpoch, oldNext], [restarted.nodeEpoch, restarted.seq], "the old process after the new one");
  assert.match(err.reason, /moved away/, "the reason says the node moved away from the process");

  // Unnumbered, a report is applied in arrival order, as in v2.
  await reports.send(plain, { node, value: state({ 1: 1 }) });
  assert.equal(text((await c.getStatsJSON()).body), statsJSON(reports.view()), "an unnumbered report is applied");
});

await check("the stats view: msgpack decoded, its JSON, the merge of the reports sent and the Go client's JSON are one value, byte for byte", async (reports) => {
  const long = "a" + "é".repeat(MAX_ERROR_MESSAGE); // cut within the last é: 1,023 bytes
  assert.equal(utf8Len(cutMessage(long)), MAX_ERROR_MESSAGE - 1, "a message cut at a character boundary");
  assert.equal(utf8Len(cutMessage("🙂".repeat(300))), 1024, "a message of 4-byte characters cut at one");
  const nodes = [
    { node: 31, value: state({ 1: 1024, 10: 2048 }, { 1: 1_700_000_000_000 }, { 10: 1_690_000_000_000 }), processedRows: { 1: 52_000, 10: 9 }, lastErrors: { 1: [{ time: 1_700_000_000_000, message: "sink table missing" }, { time: 5, message: 'q"b\\s/\u0001\u001f\b\f\n\r\t é日 🙂' }], 10: [] } },
    { node: 32, value: state({ 1: 4096 }), processedRows: { 1: 60_000, [UINT32_MAX]: 2n ** 64n - 1n }, lastErrors: { 1: [{ time: 1_700_000_000_000, message: "tie, node 32" }, { time: 1_700_000_000_000, message: "tie, node 32, second" }], 2: [{ time: -(2n ** 63n), message: long }] } },
    { node: 33, processedRows: { 3: 0 }, lastErrors: { 1: [{ time: 1_600_000_000_000, message: "old" }] } },
  ];
  for (const r of nodes) await reports.send(c, r);
  const want = reports.view();
  assert.equal(want.last_errors.get(1).length, 3, "flow 1 keeps its 3 newest errors");
  assert.equal(want.last_errors.get(2)[0].message.length, 1 + (MAX_ERROR_MESSAGE - 2) / 2, "the long message arrives cut");

  const got = await statsOf(c);
  const json = await c.getStatsJSON();
  assert.equal(got.revision, json.revision, "one state");
  assert.equal(got.chunks, 1, "a small view is one chunk");
  assert.equal(text(json.body), statsJSON(got.view), "the JSON view is the msgpack view's JSON");
  assert.equal(text(json.body), statsJSON(want), "the stats view is the merge of the reports");
  const single = await c.getView(VIEW_STATS);
  assert.equal(header(single, H_ERROR_CODE), "", header(single, H_ERROR));
  assert.equal(hex(single.data), hex(got.bodies[0]), "the stats view in one message is the chunk's bytes");
  const go = await goStats();
  assert.equal(go.revision, got.revision, "the Go client read the same revision");
  assert.equal(go.json, statsJSON(got.view), "the Go client's JSON of the view is the JavaScript client's");

  // The stats view's first three maps are the seed's aggregate at its revision.
  const seed = await c.get();
  assert.equal(seed.revision, got.revision);
  assert.equal(show(decodeAggregate(seed.body)), show(state(got.view.state_size, got.view.last_exec_time_map, got.view.start_time_map)));
  assert.equal(hex(seed.body), hex(canonicalMsgpack(want)), "the seed's bytes");
  const seeded = await c.getView(VIEW_SEED);
  assert.equal(hex(seeded.data), hex(seed.body), "Flow-State-View: seed is the seed's view");
  const seedJSON = await c.get(JSON_TYPE, JSON_TYPE);
  assert.equal(text(seedJSON.body), serdeJSON(want), "the seed's JSON carries no v3 field");
  return `${text(json.body).length} bytes of JSON`;
});

await check("an unknown view is answered 400 naming it, and the stats view in JSON chunks 400, each changing nothing", async (reports) => {
  await reports.send(c, { node: 71, value: state({ 71: 1 }), processedRows: { 71: 1 } });
  const v = parseVersion(await c.getRaw());
  for (const view of ["everything", "Stats", "seed,stats"]) {
    const msg = await c.getView(view);
    assert.equal(header(msg, H_ERROR_CODE), "400", `view ${JSON.stringify(view)}`);
    assert.ok(header(msg, H_ERROR).includes(`unknown view ${JSON.stringify(view)}`), `the reason names the view: ${header(msg, H_ERROR)}`);
  }
  const h = headers();
  h.set(H_VIEW, VIEW_STATS);
  h.set(H_ACCEPT, JSON_TYPE);
  h.set(H_CHUNKS, "1");
  const msg = await c.request(`${prefix}.state.get`, Empty, h);
  assert.equal(header(msg, H_ERROR_CODE), "400", "the stats view in JSON chunks");
  assert.equal(parseVersion(await c.getRaw()).revision, v.revision, "the state did not move");
});

await check(`a stats view past the max payload (${maxPayload} bytes): the JSON view answers 413, getStats reads it whole in chunks, each within the max payload, and it is the merge of the reports and the Go client's`, async (reports) => {
  // 4 nodes, 10 flows each, 3 errors of 100 bytes each per flow: 12,000
  // bytes of messages, past the max payload, within --max-error-bytes.
  for (let n = 0; n < 4; n++) {
    const lastErrors = {};
    const processedRows = {};
    for (let i = 0; i < 10; i++) {
      const id = 1000 + n * 10 + i;
      lastErrors[id] = errorsOf(id, 3, 100, 1_700_000_000_000 + id);
      processedRows[id] = id * 1000;
    }
    await reports.send(c, { node: 41 + n, value: state({ [1000 + n]: 1 }), processedRows, lastErrors });
  }
  const json = await rejection(c.getStatsJSON(), "the JSON view past the max payload");
  assert.ok(json instanceof ServiceError && json.code === 413, `the JSON view past the max payload: ${json}`);
  const got = await statsOf(c);
  assert.ok(got.chunks > 1, `${got.chunks} chunk(s)`);
  assert.ok(got.bytes > maxPayload, `the chunks hold ${got.bytes} bytes, past the max payload`);
  assert.equal(statsJSON(got.view), statsJSON(reports.view()), "the joined view is the merge of the reports");
  const go = await goStats();
  assert.equal(go.revision, got.revision, "the Go client read the same revision");
  assert.equal(go.json, statsJSON(got.view), "the Go client's JSON of the view is the JavaScript client's");
  return `${got.chunks} chunks, ${got.bytes} bytes`;
});

await check(`--max-error-bytes ${maxErrorBytes}: a report that would take the errors past it is answered 507 naming the limit and changes nothing; one within it is applied`, async (reports) => {
  const per = 1000; // bytes of one message
  const report = (node, flows) => {
    const lastErrors = {};
    for (let i = 0; i < flows; i++) lastErrors[node * 100 + i] = errorsOf(node * 100 + i, 3, per);
    return { node, lastErrors };
  };
  // Fill to within 3 errors of the limit, 2 flows (6,000 bytes) a report.
  const full = Math.floor(maxErrorBytes / per / 3) - 1; // flows of 3 errors that fit, leaving room for one
  let flows = 0;
  for (let node = 51; flows < full; node++) {
    const n = Math.min(2, full - flows);
    await reports.send(c, report(node, n));
    flows += n;
  }
  const held = flows * 3 * per;
  const room = maxErrorBytes - held;
  assert.ok(room >= 3 * per && room < 6 * per, `room for ${room} bytes`);
  const before = await statsOf(c);
  const err = await rejection(c.send(report(59, 2)), "a report past the limit");
  assert.ok(err instanceof ServiceError && !(err instanceof StaleReportError), `${err}`);
  assert.equal(err.code, 507, `${err}`);
  assert.match(err.reason, new RegExp(`--max-error-bytes ${maxErrorBytes}\\b`), "the reason names the limit");
  const after = await statsOf(c);
  assert.equal(after.revision, before.revision, "the revision did not move");
  assert.equal(statsJSON(after.view), statsJSON(before.view), "the view did not change");
  await reports.send(c, report(59, 1));
  assert.equal(statsJSON((await statsOf(c)).view), statsJSON(reports.view()), "a report within the limit is applied");
  return `${held} bytes held, then ${held + 3 * per}`;
});

await check("bad v3 fields: the client refuses them before sending; the worker answers 400 naming the flow and changes nothing", async (reports) => {
  const sent = c.seq;
  for (const [what, r, want] of [
    ["4 errors", { node: 61, lastErrors: { 5: errorsOf(5, 4, 30) } }, /last_errors\[5\]: 4 errors, at most 3/],
    ["an empty message", { node: 61, lastErrors: { 5: [{ time: 1, message: "" }] } }, /last_errors\[5\]\[0\]\.message/],
    ["a time outside int64", { node: 61, lastErrors: { 5: [{ time: 2n ** 63n, message: "m" }] } }, /last_errors\[5\]\[0\]\.time/],
    ["negative rows", { node: 61, processedRows: { 5: -1 } }, /processed_rows\[5\]/],
    ["a flow id outside uint32", { node: 61, processedRows: { [2 ** 32]: 1 } }, /processed_rows: flow id/],
    ["a flow named twice", { node: 61, processedRows: new Map([[5, 1], ["5", 2]]) }, /flow 5 named twice/],
  ]) {
    const err = await rejection(c.send(r), what);
    assert.ok(!(err instanceof ServiceError), `${what}: refused by the client, not the worker: ${err}`);
    assert.match(err.message, want, what);
  }
  assert.equal(c.seq, sent, "nothing was numbered");
  const v = parseVersion(await c.getRaw());
  const four = pack(entries("node_id", 61, "last_errors", new Map([[5, errorsOf(5, 4, 30).map((e) => entries("time", e.time, "message", e.message))]])));
  const r = await c.reject(`${prefix}.heartbeat.61`, four);
  assert.equal(r.code, "400");
  assert.match(r.reason, /last_errors\[5\]/, "the reason names the flow");
  assert.equal(parseVersion(await c.getRaw()).revision, v.revision, "the state did not move");
  const cut = decode(encodeReport({ node: 61, lastErrors: { 5: [{ time: 1, message: "x".repeat(2000) }] } }));
  assert.equal(cut.last_errors[5][0].message, "x".repeat(MAX_ERROR_MESSAGE), "a long message is cut, not refused");
});

await checker.finish(nc);
