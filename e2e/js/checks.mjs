// checks.mjs: the behaviours of PROTOCOL.md, one check each, as a client
// sees them. Every check but the first starts from an empty aggregate (the
// runner sends an empty report for each node a check named) and compares
// whole aggregates: decoded by @msgpack/msgpack, byte for byte against the
// canonical msgpack form, and byte for byte against serde_json's form.

import assert from "node:assert/strict";
import { Empty } from "nats";
import {
  H_ERROR,
  H_ERROR_CODE,
  JSON_TYPE,
  MSGPACK,
  header,
  report,
  reportOf,
  showHeaders,
} from "./client.mjs";
import {
  Float,
  INT64_MAX,
  INT64_MIN,
  UINT32_MAX,
  UINT64_MAX,
  canonicalMsgpack,
  decodeAggregate,
  entries,
  merge,
  nest,
  pack,
  serdeJSON,
  shortest,
  show,
  state,
} from "./wire.mjs";

const EMPTY = state();
const hex = (b) => Buffer.from(b).toString("hex");
const text = (b) => new TextDecoder().decode(b);

/** lastExec is a FlowStateValue with only last execution times. */
const lastExec = (m) => state({}, m);

/**
 * expectState gets the aggregate in both encodings and requires want:
 * decoded, the canonical msgpack bytes, and serde_json's bytes, at one
 * version. It returns the msgpack get.
 */
export async function expectState(c, want, what = "aggregate") {
  const m = await c.get();
  assert.equal(show(decodeAggregate(m.body)), show(want), `${what}: decoded msgpack`);
  assert.equal(hex(m.body), hex(canonicalMsgpack(want)), `${what}: msgpack bytes`);
  const j = await c.get(JSON_TYPE, JSON_TYPE);
  assert.equal(text(j.body), serdeJSON(want), `${what}: JSON bytes`);
  assert.equal(j.revision, m.revision, `${what}: revision of the JSON get after the msgpack get`);
  return m;
}

/** steps sends reports as requests, in order, each [node, FlowStateValue, style], and requires the merge after each. */
async function steps(c, list) {
  const reports = new Map();
  for (const [i, [node, s, style]] of list.entries()) {
    const ack = await c.ack(node, reportOf(node, s, style ?? ["string", "int", "wide"][i % 3]));
    reports.set(node, s);
    const got = await expectState(c, merge(reports), `after report ${i + 1} (node ${node})`);
    assert.ok(got.revision >= ack.revision, `get revision ${got.revision} below the ack's ${ack.revision}: the report was acked before it was visible`);
  }
  return merge(reports);
}

/** mergeRule is one of the seed's merge tests, sent through the wire. */
function mergeRule(list, want) {
  return async (c) => assert.equal(show(await steps(c, list)), show(want), "the seed's expected aggregate");
}

/** rejects sends body to <prefix>.heartbeat.<token> and requires a 400 naming field, with the state and its version unchanged. */
function rejects(token, body, field) {
  return async (c) => {
    await c.ack(7, reportOf(7, state({ 1: 10 }, { 1: 100 })));
    await c.ack(8, reportOf(8, lastExec({ 2: 20 })));
    const before = await c.get();
    const r = await c.reject(c.heartbeat(token), body);
    assert.equal(r.code, "400", `${H_ERROR_CODE}; headers: ${showHeaders(r.msg)}`);
    assert.ok(r.reason !== "", `${H_ERROR} is empty`);
    assert.ok(!/[\r\n]/.test(r.reason), `${H_ERROR} is not one line: ${JSON.stringify(r.reason)}`);
    if (field) assert.match(r.reason, field, `${H_ERROR} ${JSON.stringify(r.reason)} does not name the field`);
    const after = await c.get();
    assert.equal(after.revision, before.revision, "revision after a rejected report");
    assert.equal(hex(after.body), hex(before.body), "aggregate after a rejected report");
    return `${r.code} ${r.reason}`;
  };
}

/** A valid report of node 7, to which rejections add faults. */
const VALID = report(7, { state_size: { 1: 10 } });

/** The rejected reports of PROTOCOL.md: [name, subject token, body, the field the reason names]. */
const REJECTIONS = [
  ["float state size", "7", report(7, { state_size: { 1: 1.5 } }), /state_size/],
  ["integral float64 state size (2.0)", "7", report(7, { state_size: { 1: new Float(2) } }), /state_size/],
  ["float32 time", "7", report(7, { last_exec_time_map: { 1: new Float(100, 32) } }), /last_exec_time_map/],
  ["float node_id (7.0)", "7", report(new Float(7)), /node_id/],
  ["float flow id (1.0)", "7", pack(entries("node_id", 7, "state_size", entries(new Float(1), 1))), /state_size/],
  ["node_id differing from the subject's token", "7", report(8, { last_exec_time_map: { 2: 1 } }), /node_id|subject/],
  ["subject token with a leading zero", "07", VALID, /node_id|subject/],
  ["subject token with a sign", "+7", VALID, /node_id|subject/],
  ['flow id "07"', "7", report(7, { last_exec_time_map: { "07": 1 } }), /last_exec_time_map/],
  ['flow id "+7"', "7", report(7, { state_size: { "+7": 1 } }), /state_size/],
  ['flow id ""', "7", report(7, { state_size: { "": 1 } }), /state_size/],
  ['flow 7 named twice, as 7 and "7"', "7", pack(entries("node_id", 7, "state_size", entries(7, 1, "7", 2))), /state_size/],
  ["flow named twice as the same integer", "7", pack(entries("node_id", 7, "start_time_map", entries(7, 1, 7, 2))), /start_time_map/],
  ["flow id outside uint32", "7", pack(entries("node_id", 7, "state_size", entries(UINT32_MAX + 1, 1))), /state_size/],
  ["negative flow id", "7", pack(entries("node_id", 7, "start_time_map", entries(-1, 1))), /start_time_map/],
  ["negative state size", "7", report(7, { state_size: { 1: -1 } }), /state_size/],
  ["string time", "7", report(7, { last_exec_time_map: { 1: "100" } }), /last_exec_time_map/],
  ["time outside int64", "7", report(7, { start_time_map: { 1: INT64_MAX + 1n } }), /start_time_map/],
  ["missing node_id", "7", pack({ state_size: { 1: 1 } }), /node_id/],
  ["string node_id", "7", pack({ node_id: "7" }), /node_id/],
  ["negative node_id", "7", pack({ node_id: -7 }), /node_id/],
  ["node_epoch of the wrong type", "7", report(7, { node_epoch: "yesterday" }), /node_epoch/],
  ["field named twice", "7", pack(entries("node_id", 7, "node_id", 7)), /node_id/],
  ["map field of the wrong type", "7", report(7, { state_size: [1] }), /state_size/],
  ["unknown field nested 33 levels deep", "7", report(7, { future: nest(32) }), null],
  ["trailing bytes", "7", Uint8Array.of(...VALID, 0xc0), null],
  ["truncated body", "7", VALID.subarray(0, VALID.length - 1), null],
  ["array body", "7", pack(["node_id", 7]), null],
  ["reserved byte 0xc1", "7", Uint8Array.of(0xc1), null],
  ["empty body", "7", Empty, null],
];

/** checks returns the list of [name, async (client) => optional note]. */
export function checks() {
  return [
    ["get before any report: revision 0 and the empty value, in msgpack and JSON", async (c) => {
      const m = await c.get();
      assert.equal(m.revision, 0n, "revision before any report");
      assert.equal(hex(m.body), "83" + "aa" + hex(Buffer.from("state_size")) + "80" + "b2" + hex(Buffer.from("last_exec_time_map")) + "80" + "ae" + hex(Buffer.from("start_time_map")) + "80", "the empty value");
      const j = await c.get(JSON_TYPE, JSON_TYPE);
      assert.equal(j.revision, 0n);
      assert.equal(text(j.body), '{"state_size":{},"last_exec_time_map":{},"start_time_map":{}}');
    }],

    ["ack: empty body with Flow-State-Revision (decimal) and Flow-State-Epoch; revisions increase; a get after it sees the report", async (c) => {
      const before = await c.get();
      await steps(c, [
        [1, state({ 1: 10 }, { 1: 100 })],
        [2, state({ 2: 20 })],
        [2, state({ 2: 20 })], // unchanged aggregate: still acked, at a new revision
        [1, state({}, {}, { 1: 5 })],
        [3, EMPTY], // a node with no flows
      ]);
      assert.ok(c.lastAck > before.revision, "acked revisions above the get before them");
    }],

    ["flow ids as msgpack integers of every width (fixint, uint8, uint16, uint32, uint64)", async (c) => {
      const ids = entries(0, 1, 127, 2, 128, 3, 255, 4, 256, 5, 65535, 6, 65536, 7, UINT32_MAX, 8, 9n, 9);
      await c.ack(11, pack(entries("node_id", 11, "state_size", ids)));
      await expectState(c, state({ 0: 1, 127: 2, 128: 3, 255: 4, 256: 5, 65535: 6, 65536: 7, [UINT32_MAX]: 8, 9: 9 }));
    }],

    ["flow ids as canonical decimal strings", async (c) => {
      await c.ack(12, report(12, { state_size: { 0: 1, 2: 2, 10: 3, [UINT32_MAX]: 4 }, last_exec_time_map: { 7: 1700000000000 } }));
      await expectState(c, state({ 0: 1, 2: 2, 10: 3, [UINT32_MAX]: 4 }, { 7: 1700000000000 }));
    }],

    ["flow ids as integers and strings in one map", async (c) => {
      await c.ack(13, pack(entries("node_id", 13, "start_time_map", entries(1, 10, "2", 20, 3n, 30, "40", -40))));
      await expectState(c, state({}, {}, { 1: 10, 2: 20, 3: 30, 40: -40 }));
    }],

    ["values of every integer width, BigInt uint64 and int64 included, and node ids up to 2^64-1", async (c) => {
      const sizes = { 1: 0, 2: 127, 3: 128, 4: 255, 5: 256, 6: 65535, 7: 65536, 8: 2 ** 32, 9: 2 ** 53 - 1, 10: 2n ** 53n + 1n, 11: UINT64_MAX, 12: 5n };
      const times = { 1: -1, 2: -32, 3: -33, 4: -128, 5: -129, 6: -32768, 7: -32769, 8: -(2 ** 31), 9: -(2 ** 31) - 1, 10: 1700000000000, 11: INT64_MIN, 12: INT64_MAX, 13: -5n };
      await c.ack(21, report(21, { state_size: sizes, last_exec_time_map: times }));
      await c.ack(UINT64_MAX, reportOf(UINT64_MAX, state({ 20: 1 }, {}, { 20: 2 ** 40 }), "wide"));
      await c.ack(256, reportOf(256, state({ 21: 3 }, { 21: -3 }), "int"));
      await expectState(c, state({ ...sizes, 20: 1, 21: 3 }, { ...times, 21: -3 }, { 20: 2 ** 40 }));
    }],

    ["unknown fields of any type are ignored, nested up to 32 levels", async (c) => {
      await c.ack(14, pack(entries(
        "future", { f: 1.5, s: "x", n: null, b: true, bin: Uint8Array.of(1, 2), a: [-1, 2.5, { deep: { x: [1, "y"] } }], m: new Map([[1, "one"], [-2n, null]]) },
        "node_id", 14,
        "when", new Date(1700000000005),
        "more", null,
        "node_epoch", 1700000000000,
        "last_exec_time_map", { 3: 30 },
        "a_number", 3.25,
        "deepest", nest(31), // levels 2 to 32, counting the report as level 1
        "start_time_map", new Map([[4, -4]]),
      )));
      await expectState(c, state({}, { 3: 30 }, { 4: -4 }));
    }],

    ["absent or nil maps and node_epoch mean empty", async (c) => {
      await c.ack(15, reportOf(15, state({ 1: 1 }, { 1: 1 }, { 1: 1 })));
      await c.ack(16, reportOf(16, state({ 2: 2 })));
      await c.ack(15, report(15, { node_epoch: null, state_size: null, last_exec_time_map: null, start_time_map: null }));
      await c.ack(16, report(16));
      await expectState(c, EMPTY);
    }],

    ["merge: keeps reports from different nodes", mergeRule(
      [[1, lastExec({ 1: 100 })], [2, lastExec({ 2: 200 })], [1, lastExec({ 1: 300 })]],
      lastExec({ 1: 300, 2: 200 }),
    )],
    ["merge: a report replaces the same node's previous report", mergeRule(
      [[1, lastExec({ 1: 100 })], [1, lastExec({ 2: 200 })]],
      lastExec({ 2: 200 }),
    )],
    ["merge: accepts a clock rollback from the same node (node_epoch never orders)", async (c) => {
      await c.ack(1, report(1, { node_epoch: 2000, last_exec_time_map: { 1: 100 } }));
      await c.ack(1, report(1, { node_epoch: 1000, last_exec_time_map: { 1: 50 } }));
      await expectState(c, lastExec({ 1: 50 }));
    }],
    ["merge: state_size and last_exec_time_map take the max across nodes", mergeRule(
      [[1, state({ 1: 1024 }, { 1: 100 })], [2, state({ 1: 2048 }, { 1: 50 })]],
      state({ 1: 2048 }, { 1: 100 }),
    )],
    ["merge: start_time_map takes the max across nodes", mergeRule(
      [[1, state({}, {}, { 1: 100, 2: -5 })], [2, state({}, {}, { 1: 50, 2: -7 })]],
      state({}, {}, { 1: 100, 2: -5 }),
    )],
    ["merge: a lowered max falls back to the other nodes", mergeRule(
      [[1, state({ 1: 1024 })], [2, state({ 1: 2048 })], [2, state({ 1: 10 })]],
      state({ 1: 1024 }),
    )],
    ["merge: an empty report removes the node's own flows and keeps the others'", mergeRule(
      [[1, lastExec({ 1: 100 })], [2, lastExec({ 2: 200 })], [1, EMPTY]],
      lastExec({ 2: 200 }),
    )],

    ["get: msgpack aggregate, Content-Type application/msgpack, keys in order, integer flow ids ascending, shortest integers", async (c) => {
      // string flow ids in an order that is neither numeric nor lexical
      await c.ack(17, pack(entries("node_id", 17,
        "start_time_map", entries("10", 1, "2", 2),
        "state_size", entries("100", 300, "2", 70000, "10", 2 ** 40, "1", 0),
        "last_exec_time_map", entries("10", -1, "2", 1700000000000))));
      const want = state({ 1: 0, 2: 70000, 10: 2 ** 40, 100: 300 }, { 2: 1700000000000, 10: -1 }, { 2: 2, 10: 1 });
      const m = await expectState(c, want);
      for (const accept of ["text/plain", MSGPACK]) {
        const o = await c.get(accept, MSGPACK);
        assert.equal(o.revision, m.revision, `revision with Accept ${accept}`);
        assert.equal(hex(o.body), hex(m.body), `body with Accept ${accept}`);
      }
    }],

    ['get with Accept: application/json: exactly serde_json\'s bytes ("2" before "10")', async (c) => {
      await c.ack(18, reportOf(18, state({ 10: 2048, 2: 1024 }, { 10: 1700000000000, 2: -1 }, { 1: 0 }), "int"));
      const j = await c.get(JSON_TYPE, JSON_TYPE);
      assert.equal(text(j.body), '{"state_size":{"2":1024,"10":2048},"last_exec_time_map":{"2":-1,"10":1700000000000},"start_time_map":{"1":0}}');
    }],

    ["a published report (no reply subject) is applied, in arrival order", async (c) => {
      for (let i = 1; i <= 20; i++) c.publish(19, reportOf(19, lastExec({ 1: i, [i]: i }), ["string", "int", "wide"][i % 3]));
      await c.ack(20, reportOf(20, lastExec({ 2: 1 }))); // same connection, same subscription: applied after the 20
      await expectState(c, lastExec({ 1: 20, 20: 20, 2: 1 }));
    }],

    ["updates on <prefix>.state: headers, strictly increasing revisions, the last after a burst equals a get", async (c) => {
      const u = await c.subscribeUpdates();
      try {
        const ack = await c.ack(31, reportOf(31, lastExec({ 1: 1 })));
        const got = await u.until(ack.revision);
        assert.equal(got.at(-1).revision, ack.revision, "an update at the acked revision");
        assert.equal(show(got.at(-1).state), show(lastExec({ 1: 1 })), "the update's aggregate");
        const reports = 50;
        const first = got.length;
        for (let i = 0; i < reports; i++) c.publish(32 + (i % 5), reportOf(32 + (i % 5), state({ [i % 5]: i }, { [i % 5]: 1000 + i })));
        await c.ack(37, reportOf(37, lastExec({ 9: 9 })));
        const g = await c.get();
        got.push(...(await u.until(g.revision)));
        // Nothing stale follows: the next update is the next change's.
        const marker = await c.ack(37, reportOf(37, lastExec({ 9: 10 })));
        const after = await u.until(marker.revision);
        assert.deepEqual(after.map((m) => String(m.revision)), [String(marker.revision)], "updates after the burst's last");
        for (let i = 1; i < got.length; i++) {
          assert.ok(got[i].revision > got[i - 1].revision, `update revisions not strictly increasing: ${got.map((m) => m.revision).join(", ")}`);
        }
        const last = got.at(-1);
        assert.equal(last.revision, g.revision, "the last update is at the get's revision");
        assert.equal(hex(last.body), hex(g.body), "the last update is the get's aggregate");
        const burst = got.length - first;
        assert.ok(burst < reports + 1, `${burst} updates for a burst of ${reports + 1} reports: not coalesced`);
        return `${burst} update(s) for a burst of ${reports + 1} reports`;
      } finally {
        u.unsubscribe();
      }
    }],

    ["updates: an applied report that leaves the aggregate unchanged publishes nothing", async (c) => {
      const u = await c.subscribeUpdates();
      try {
        const first = await c.ack(38, reportOf(38, lastExec({ 1: 1 })));
        await u.until(first.revision);
        const same = await c.ack(38, reportOf(38, lastExec({ 1: 1 }), "wide"));
        // A report that changes the state comes next: the updates up to its
        // revision must be its own alone, none for the report before it.
        const changed = await c.ack(38, reportOf(38, lastExec({ 1: 2 })));
        const got = await u.until(changed.revision);
        assert.deepEqual(got.map((m) => String(m.revision)), [String(changed.revision)],
          `updates after a report (revision ${same.revision}) that changed nothing, then one that did`);
        assert.equal(show(got.at(-1).state), show(lastExec({ 1: 2 })));
      } finally {
        u.unsubscribe();
      }
    }],

    ...REJECTIONS.map(([name, token, body, field]) => [`rejected (400, the state and revision unchanged): ${name}`, rejects(token, body, field)]),

    ["--max-flows (default 100000) counts distinct flow ids across the three maps; a JSON aggregate over the max payload gets 413", async (c) => {
      // integer flow ids: as decimal strings the report of 200000 entries would exceed the max payload
      const ids = (from, to) => new Map(Array.from({ length: to - from + 1 }, (_, i) => [from + i, 0]));
      const tooMany = report(9, { state_size: ids(1, 60000), last_exec_time_map: ids(50001, 100001) });
      const r = await c.reject(c.heartbeat(9), tooMany);
      assert.equal(r.code, "400", `100001 distinct flows: ${H_ERROR_CODE}; headers: ${showHeaders(r.msg)}`);
      const before = await c.get();
      assert.equal(hex(before.body), hex(canonicalMsgpack(EMPTY)), "state after the rejected report");
      const all = ids(1, 100000);
      await c.ack(9, report(9, { state_size: all, start_time_map: all }));
      const want = state(all, {}, all);
      const m = await c.get();
      assert.equal(hex(m.body), hex(canonicalMsgpack(want)), "msgpack bytes of 100000 flows");
      const json = serdeJSON(want).length;
      const j = await c.getRaw(JSON_TYPE);
      assert.equal(header(j, H_ERROR_CODE), "413", `JSON aggregate of ${json} bytes: ${H_ERROR_CODE}; headers: ${showHeaders(j)}`);
      return `${m.body.length} bytes of msgpack, ${json} of JSON`;
    }],

    ["micro discovery: $SRV.PING, $SRV.INFO and $SRV.STATS name the flowstate service and its get endpoint", async (c) => {
      const ask = async (subject) => JSON.parse(text((await c.request(subject)).data));
      const ping = await ask("$SRV.PING.flowstate");
      assert.equal(ping.name, "flowstate");
      assert.equal(ping.type, "io.nats.micro.v1.ping_response");
      assert.ok(typeof ping.id === "string" && ping.id !== "", "PING id");
      assert.equal((await ask("$SRV.PING")).name, "flowstate", "$SRV.PING");
      assert.equal((await ask(`$SRV.PING.flowstate.${ping.id}`)).id, ping.id, "PING by id");
      const info = await ask("$SRV.INFO.flowstate");
      assert.equal(info.name, "flowstate");
      assert.equal(info.type, "io.nats.micro.v1.info_response");
      assert.equal(info.id, ping.id);
      const get = (info.endpoints ?? []).find((e) => e.subject === `${c.prefix}.state.get`);
      assert.ok(get, `INFO lists no endpoint on ${c.prefix}.state.get: ${JSON.stringify(info.endpoints)}`);
      const stats = await ask(`$SRV.STATS.flowstate.${ping.id}`);
      assert.equal(stats.type, "io.nats.micro.v1.stats_response");
      const st = (stats.endpoints ?? []).find((e) => e.subject === `${c.prefix}.state.get`);
      assert.ok(st && st.num_requests > 0, `STATS of the get endpoint: ${JSON.stringify(st)}`);
      return `service ${ping.name} ${ping.version ?? ""} id ${ping.id}`;
    }],
  ];
}

/** reset sends an empty report for every node the check named, and requires the empty aggregate. */
export async function reset(c) {
  for (const node of c.touched) {
    await c.ack(node, report(shortest(BigInt(node))));
  }
  c.touched.clear();
  await expectState(c, EMPTY, "after the reset");
}
