// client.mjs: a flownode and a frontend of PROTOCOL.md on the nats package.

import assert from "node:assert/strict";
import { Empty, headers } from "nats";
import { UINT64_MAX, decodeAggregate, entries, pack, shortest } from "./wire.mjs";

// Bounds of every wait, in milliseconds.
export const REQUEST_TIMEOUT = 5000; // a request is answered
export const MESSAGE_TIMEOUT = 5000; // an expected message arrives

// Header names and values of PROTOCOL.md, exactly as written there.
export const H_REVISION = "Flow-State-Revision";
export const H_EPOCH = "Flow-State-Epoch";
export const H_CONTENT_TYPE = "Content-Type";
export const H_ACCEPT = "Accept";
export const H_ERROR = "Nats-Service-Error";
export const H_ERROR_CODE = "Nats-Service-Error-Code";
export const MSGPACK = "application/msgpack";
export const JSON_TYPE = "application/json";

/** header returns the value of a header, "" when absent. */
export function header(msg, name) {
  return msg.headers?.get(name) ?? "";
}

/**
 * parseVersion reads Flow-State-Epoch and Flow-State-Revision: a non-empty
 * epoch and a canonical decimal uint64 revision (a BigInt).
 */
export function parseVersion(msg) {
  const epoch = header(msg, H_EPOCH);
  assert.ok(epoch !== "", `${H_EPOCH} header missing; headers: ${showHeaders(msg)}`);
  const rev = header(msg, H_REVISION);
  assert.match(rev, /^(0|[1-9][0-9]*)$/, `${H_REVISION} header ${JSON.stringify(rev)} is not canonical decimal; headers: ${showHeaders(msg)}`);
  assert.ok(BigInt(rev) <= UINT64_MAX, `${H_REVISION} ${rev} exceeds uint64`);
  return { epoch, revision: BigInt(rev) };
}

export function showHeaders(msg) {
  if (!msg.headers) return "(none)";
  return JSON.stringify([...msg.headers.keys()].map((k) => [k, msg.headers.get(k)]));
}

/** report is a heartbeat report body: node_id and the given fields, string keyed. */
export function report(node, fields = {}) {
  return pack({ node_id: node, ...fields });
}

/**
 * reportOf is the report of node carrying the FlowStateValue s, its flow ids
 * written in one of three styles:
 *   "string": canonical decimal strings (a plain object, the library's own encoding);
 *   "int":    msgpack integers, every integer in its shortest form;
 *   "wide":   every integer as a 64-bit msgpack integer (0xcf, 0xd3), node_id and flow ids included.
 */
export function reportOf(node, s, style = "string") {
  const conv = {
    string: (m) => Object.fromEntries([...m].map(([k, v]) => [String(k), shortest(v)])),
    int: (m) => new Map([...m].map(([k, v]) => [k, shortest(v)])),
    wide: (m) => new Map([...m].map(([k, v]) => [BigInt(k), BigInt(v)])),
  }[style];
  assert.ok(conv, `unknown style ${style}`);
  const id = style === "wide" ? BigInt(node) : shortest(BigInt(node));
  return pack(entries("node_id", id, "state_size", conv(s.state_size), "last_exec_time_map", conv(s.last_exec_time_map), "start_time_map", conv(s.start_time_map)));
}

/** Client talks to one worker the way flownodes and frontends do. */
export class Client {
  /**
   * @param {import("nats").NatsConnection} nc
   * @param {string} prefix
   */
  constructor(nc, prefix) {
    this.nc = nc;
    this.prefix = prefix;
    this.epoch = ""; // the epoch of the first version seen
    this.lastAck = -1n; // the revision of the last ack
    this.touched = new Set(); // node ids (as strings) that reports named
  }

  heartbeat(node) {
    return `${this.prefix}.heartbeat.${node}`;
  }

  /** request sends body to subject as a request and returns the reply. */
  async request(subject, body = Empty, hdrs = undefined) {
    return this.nc.request(subject, body, { timeout: REQUEST_TIMEOUT, ...(hdrs ? { headers: hdrs } : {}) });
  }

  /** sameEpoch requires every version of the run to share one epoch (one memory-backed worker). */
  sameEpoch(v, what) {
    if (this.epoch === "") this.epoch = v.epoch;
    assert.equal(v.epoch, this.epoch, `epoch of ${what}`);
  }

  /**
   * ack sends a report to <prefix>.heartbeat.<node> as a request and requires
   * an ack: empty body, no error, a revision greater than any ack before.
   */
  async ack(node, body) {
    this.touched.add(String(node));
    const msg = await this.request(this.heartbeat(node), body);
    assert.equal(header(msg, H_ERROR_CODE), "", `report of node ${node} rejected: ${header(msg, H_ERROR_CODE)} ${header(msg, H_ERROR)}`);
    assert.equal(header(msg, H_ERROR), "", "error reason on an ack");
    assert.equal(msg.data.length, 0, "ack body is not empty");
    const v = parseVersion(msg);
    this.sameEpoch(v, "an ack");
    assert.ok(v.revision > this.lastAck, `ack revision ${v.revision} not greater than the previous ack's ${this.lastAck}`);
    this.lastAck = v.revision;
    return v;
  }

  /** publish sends a report without asking for an ack. */
  publish(node, body) {
    this.touched.add(String(node));
    this.nc.publish(this.heartbeat(node), body);
  }

  /** reject sends a report to subject as a request and returns the error headers. */
  async reject(subject, body) {
    const msg = await this.request(subject, body);
    return { code: header(msg, H_ERROR_CODE), reason: header(msg, H_ERROR), msg };
  }

  /** getRaw sends a get, with an Accept header unless accept is "", and returns the reply. */
  async getRaw(accept = "") {
    let h;
    if (accept !== "") {
      h = headers();
      h.set(H_ACCEPT, accept);
    }
    return this.request(`${this.prefix}.state.get`, Empty, h);
  }

  /** get sends a get and requires an aggregate of the given content type. */
  async get(accept = "", want = MSGPACK) {
    const msg = await this.getRaw(accept);
    return this.aggregate(msg, want, `get (Accept ${JSON.stringify(accept)})`);
  }

  /** aggregate checks the headers of an aggregate message and returns its version and body. */
  aggregate(msg, want, what) {
    assert.equal(header(msg, H_ERROR_CODE), "", `${what} failed: ${header(msg, H_ERROR_CODE)} ${header(msg, H_ERROR)}`);
    assert.equal(header(msg, H_CONTENT_TYPE), want, `${H_CONTENT_TYPE} of ${what}`);
    const v = parseVersion(msg);
    this.sameEpoch(v, what);
    return { ...v, body: msg.data };
  }

  /** subscribeUpdates subscribes to <prefix>.state and flushes, so that the subscription is in place. */
  async subscribeUpdates() {
    const u = new Updates(this);
    u.sub = this.nc.subscribe(`${this.prefix}.state`, { callback: (err, msg) => u.push(err, msg) });
    await this.nc.flush();
    return u;
  }
}

/** Updates receives the aggregates published on <prefix>.state, in arrival order. */
export class Updates {
  constructor(client) {
    this.client = client;
    this.queue = [];
    this.waiter = null;
    this.sub = null;
    this.error = null;
  }

  push(err, msg) {
    if (err) this.error = err;
    else this.queue.push(msg);
    this.waiter?.();
  }

  /** next returns the next update, or null if none arrives within timeout ms. */
  async next(timeout = MESSAGE_TIMEOUT) {
    if (this.queue.length === 0) {
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, timeout);
        this.waiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.waiter = null;
    }
    if (this.error) throw this.error;
    const msg = this.queue.shift();
    if (!msg) return null;
    const m = this.client.aggregate(msg, MSGPACK, "an update");
    m.state = decodeAggregate(m.body);
    return m;
  }

  /** until returns every update up to and including the first at revision rev or later. */
  async until(rev) {
    const got = [];
    for (;;) {
      const m = await this.next();
      assert.ok(m, `no update at revision ${rev} or later within ${MESSAGE_TIMEOUT} ms (last: ${got.at(-1)?.revision ?? "none"})`);
      got.push(m);
      if (m.revision >= rev) return got;
    }
  }

  unsubscribe() {
    this.sub?.unsubscribe();
  }
}
