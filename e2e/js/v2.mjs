#!/usr/bin/env node
// v2.mjs: a frontend of PROTOCOL.md v2 written from that page alone, in
// JavaScript: it follows <prefix>.state.delta, takes chunked snapshots
// (Flow-State-Chunks: 1) when it must, and checks that the state it rebuilt
// is the single-message get's, byte for byte, after concurrent reports from
// many nodes, then again after the worker restarts (a new epoch), and reads
// a state over the max payload in chunks.
//
//   node v2.mjs NATS_URL PREFIX
//
// The worker must be fresh and memory-backed. Halfway, the script prints
// "# restart the worker" and waits for a line "restarted" on stdin: the
// caller (e2e/v2_jsclient_test.go) restarts the worker meanwhile. It prints one
// line per check and a last line "N passed, N failed", and exits 1 if a
// check failed, 2 on bad usage or when it cannot connect.

import assert from "node:assert/strict";
import { createInterface } from "node:readline";
import { Empty } from "nats";
import { Checker, hex, watchdog } from "./checker.mjs";
import { H_ERROR, H_ERROR_CODE, ascendingRanges, getChunks, header, parseVersion, reportOf } from "./client.mjs";
import { FIELDS, canonicalMsgpack, decodeAggregate, decodeDelta, state } from "./wire.mjs";

const H_BASE = "Flow-State-Base-Revision";
const H_RESYNC = "Flow-State-Resync";

const TIMEOUT = 10_000; // a reply, a chunk, the delta that catches up
const RUN_TIMEOUT = 240_000;
const NODES = 20;
const ROUNDS = 25;

const [url, prefix, ...extra] = process.argv.slice(2);
if (!url || !prefix || extra.length > 0) {
  console.error("usage: node v2.mjs NATS_URL PREFIX");
  process.exit(2);
}
watchdog(RUN_TIMEOUT);

/** chunkedGet sends a get with Flow-State-Chunks: 1 and joins its chunks. */
async function chunkedGet(nc) {
  const got = await getChunks(nc, `${prefix}.state.get`, {}, TIMEOUT);
  const parts = got.bodies.map((b) => decodeAggregate(b));
  ascendingRanges(parts.map((s) => [...new Set(FIELDS.flatMap((f) => [...s[f].keys()]))].sort((a, b) => a - b)));
  const joined = state();
  for (const s of parts) {
    for (const f of FIELDS) {
      for (const [id, x] of s[f]) joined[f].set(id, x);
    }
  }
  return { epoch: got.epoch, revision: got.revision, state: state(joined.state_size, joined.last_exec_time_map, joined.start_time_map), chunks: parts.length };
}

/** singleGet sends a v1 get and returns its version and body. */
async function singleGet(nc) {
  const msg = await nc.request(`${prefix}.state.get`, Empty, { timeout: TIMEOUT });
  assert.equal(header(msg, H_ERROR_CODE), "", `get failed: ${header(msg, H_ERROR)}`);
  return { ...parseVersion(msg), body: msg.data };
}

/** Follower rebuilds the state from deltas and chunked snapshots. */
class Follower {
  constructor(nc) {
    this.nc = nc;
    this.queue = [];
    this.waiter = null;
    this.cur = null; // { epoch, revision, state }
    this.applied = 0;
    this.snapshots = 0;
    this.resyncDeltas = 0;
  }

  async start() {
    this.sub = this.nc.subscribe(`${prefix}.state.delta`, {
      callback: (err, msg) => {
        if (!err) this.queue.push(msg);
        this.waiter?.();
      },
    });
    await this.nc.flush();
    await this.snapshot();
  }

  async snapshot() {
    const s = await chunkedGet(this.nc);
    this.snapshots++;
    if (this.cur && s.epoch === this.cur.epoch && s.revision <= this.cur.revision) return;
    this.cur = s;
  }

  /** handle takes one delta: apply it if its base is at or below our revision in our epoch, else snapshot. */
  async handle(msg) {
    const v = parseVersion(msg);
    const base = header(msg, H_BASE);
    assert.match(base, /^(0|[1-9][0-9]*)$/, `${H_BASE} ${JSON.stringify(base)}`);
    const d = decodeDelta(msg.data);
    assert.equal(d.base, BigInt(base), "body base equals the header");
    if (header(msg, H_RESYNC) === "1") {
      assert.equal(d.flows.length, 0, "a resync delta has no flows");
      this.resyncDeltas++;
    }
    if (v.epoch === this.cur.epoch && v.revision <= this.cur.revision) return;
    if (header(msg, H_RESYNC) === "1" || v.epoch !== this.cur.epoch || d.base > this.cur.revision) {
      await this.snapshot();
      return;
    }
    for (const [id, arr] of d.flows) {
      FIELDS.forEach((f, i) => {
        if (arr[i] === null || arr[i] === undefined) this.cur.state[f].delete(id);
        else this.cur.state[f].set(id, BigInt(arr[i]));
      });
    }
    this.cur.revision = v.revision;
    this.applied++;
  }

  /** pump handles the deltas that arrive until fn resolves. */
  async pump(promise) {
    let done = false;
    promise.finally(() => {
      done = true;
      this.waiter?.();
    });
    while (!done || this.queue.length > 0) {
      if (this.queue.length === 0) {
        await new Promise((resolve) => (this.waiter = resolve));
        this.waiter = null;
        continue;
      }
      await this.handle(this.queue.shift());
    }
    await promise;
  }

  /** until handles deltas until the follower holds the version v. */
  async until(v) {
    const deadline = Date.now() + TIMEOUT;
    while (!(this.cur.epoch === v.epoch && this.cur.revision >= v.revision)) {
      if (this.queue.length === 0) {
        const left = deadline - Date.now();
        assert.ok(left > 0, `no delta brought revision ${v.revision} of ${v.epoch} (at ${this.cur.revision} of ${this.cur.epoch})`);
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, left);
          this.waiter = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        this.waiter = null;
        continue;
      }
      await this.handle(this.queue.shift());
    }
  }
}

/** churn sends ROUNDS reports from each of NODES nodes concurrently, each acked. */
async function churn(nc, seed) {
  let rnd = seed >>> 0;
  const rand = (n) => {
    rnd = (Math.imul(rnd, 1664525) + 1013904223) >>> 0; // a 32-bit LCG
    return (rnd >>> 8) % n;
  };
  const node = async (id) => {
    for (let k = 0; k < ROUNDS; k++) {
      const sizes = {};
      const last = { 1: 1_700_000_000_000 + k * 100 + id };
      const start = {};
      for (let i = 0; i < 15; i++) {
        if (rand(4) === 0) continue; // this flow leaves this round
        const fid = id * 100 + i;
        // Few distinct values, so that flows often leave and come back, or
        // change and change back, between two updates.
        sizes[fid] = 1024 * rand(3);
        last[fid] = 1_700_000_000_000 + k;
        if (rand(2) === 0) start[fid] = 1_690_000_000_000 + id;
      }
      const msg = await nc.request(`${prefix}.heartbeat.${id}`, reportOf(id, state(sizes, last, start), "int"), { timeout: TIMEOUT });
      assert.equal(header(msg, H_ERROR_CODE), "", `report of node ${id}: ${header(msg, H_ERROR)}`);
    }
  };
  await Promise.all(Array.from({ length: NODES }, (_, i) => node(i + 1)));
}

const checker = new Checker();
const check = (name, fn) => checker.check(name, fn);

const nc = await checker.connect(url, { name: "flowstate-js-v2", maxReconnectAttempts: -1, reconnectTimeWait: 100 });
console.log(`# ${url} prefix ${prefix}; node ${process.version}; max_payload ${nc.info?.max_payload ?? "?"}`);

const f = new Follower(nc);
await check("a chunked get of a small state is one chunk, 1/1, the single-message get's bytes", async () => {
  await f.start();
  const s = await chunkedGet(nc);
  const g = await singleGet(nc);
  assert.equal(s.chunks, 1);
  assert.equal(s.revision, g.revision);
  assert.equal(hex(canonicalMsgpack(s.state)), hex(g.body));
});

async function followChurn(seed) {
  await f.pump(churn(nc, seed));
  const g = await singleGet(nc);
  await f.until(g);
  assert.equal(f.cur.revision, g.revision, "the follower ends at the get's revision");
  assert.equal(hex(canonicalMsgpack(f.cur.state)), hex(g.body), "the rebuilt state is the single-message get's, byte for byte");
  return `${f.applied} deltas applied, ${f.snapshots} snapshots, ${f.resyncDeltas} resync deltas, ${f.cur.state.state_size.size} flows`;
}

await check(`deltas and chunked gets rebuild the state under concurrent reports from ${NODES} nodes`, () => followChurn(1));

const epochBefore = f.cur.epoch;
console.log("# restart the worker");
const rl = createInterface({ input: process.stdin });
for await (const line of rl) if (line.trim() === "restarted") break;
rl.close();

await check("after a worker restart (a new epoch), the follower resyncs and rebuilds the new state", async () => {
  const note = await followChurn(2);
  assert.notEqual(f.cur.epoch, epochBefore, "a new epoch");
  return note;
});

await check("a state over the max payload: the single-message get answers 413, the chunked get reads it whole, the follower follows", async () => {
  const nodes = 20;
  const perNode = 2000;
  const reports = new Map();
  const acks = [];
  for (let id = 1; id <= nodes; id++) {
    const sizes = {};
    const last = {};
    const start = {};
    for (let i = 0; i < perNode; i++) {
      const fid = 100_000 + id * perNode + i;
      sizes[fid] = 1_000_000 + fid;
      last[fid] = 1_700_000_000_000 + i;
      start[fid] = 1_690_000_000_000 + i;
    }
    reports.set(id, state(sizes, last, start));
    acks.push(nc.request(`${prefix}.heartbeat.${1000 + id}`, reportOf(1000 + id, reports.get(id), "int"), { timeout: TIMEOUT }));
  }
  await f.pump(Promise.all(acks).then((msgs) => msgs.forEach((m) => assert.equal(header(m, H_ERROR_CODE), "", header(m, H_ERROR)))));
  const single = await nc.request(`${prefix}.state.get`, Empty, { timeout: TIMEOUT });
  assert.equal(header(single, H_ERROR_CODE), "413", "the single-message get of a state over the max payload");
  const s = await chunkedGet(nc);
  assert.ok(s.chunks > 1, `${s.chunks} chunk(s)`);
  await f.until(s);
  const want = hex(canonicalMsgpack(s.state));
  assert.equal(hex(canonicalMsgpack(f.cur.state)), want, "the follower's state is the chunked get's");
  for (const [id, r] of reports) {
    for (const field of FIELDS) {
      for (const [fid, v] of r[field]) assert.equal(s.state[field].get(fid), v, `node ${id}: ${field}[${fid}]`);
    }
  }
  return `${s.chunks} chunks, ${s.state.state_size.size} flows`;
});

await checker.finish(nc);
