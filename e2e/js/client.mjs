// client.mjs: a flownode and a frontend of PROTOCOL.md on the nats package.

import assert from "node:assert/strict";
import { Empty, createInbox, headers } from "nats";
import { UINT64_MAX, decodeAggregate, decodeStats, encodeReport, entries, pack, shortest, statsIds } from "./wire.mjs";

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
export const H_CHUNKS = "Flow-State-Chunks";
export const H_CHUNK = "Flow-State-Chunk";
export const H_VIEW = "Flow-State-View";
export const VIEW_STATS = "stats";
export const VIEW_SEED = "seed";
export const MSGPACK = "application/msgpack";
export const JSON_TYPE = "application/json";

/** header returns the value of a header, "" when absent. */
export function header(msg, name) {
  return msg.headers?.get(name) ?? "";
}

/**
 * parseVersion reads Flow-State-Epoch and Flow-State-Revision: an epoch of 1
 * to 64 printable ASCII characters and a canonical decimal uint64 revision
 * (a BigInt).
 */
export function parseVersion(msg) {
  const epoch = header(msg, H_EPOCH);
  assert.ok(epoch !== "", `${H_EPOCH} header missing; headers: ${showHeaders(msg)}`);
  assert.match(epoch, /^[!-~]{1,64}$/, `${H_EPOCH} ${JSON.stringify(epoch.slice(0, 80))} is not 1 to 64 printable ASCII characters`);
  const rev = header(msg, H_REVISION);
  assert.match(rev, /^(0|[1-9][0-9]*)$/, `${H_REVISION} header ${JSON.stringify(rev)} is not canonical decimal; headers: ${showHeaders(msg)}`);
  assert.ok(BigInt(rev) <= UINT64_MAX, `${H_REVISION} ${rev} exceeds uint64`);
  return { epoch, revision: BigInt(rev) };
}

export function showHeaders(msg) {
  if (!msg.headers) return "(none)";
  return JSON.stringify([...msg.headers.keys()].map((k) => [k, msg.headers.get(k)]));
}

/**
 * ServiceError is a request answered with the service error headers:
 * code is Nats-Service-Error-Code (a number: 400 bad input, 409 a stale
 * report, 413 too large, 507 past a capacity limit, 503 not ready), reason
 * Nats-Service-Error.
 */
export class ServiceError extends Error {
  constructor(what, code, reason) {
    super(`${what}: ${code} ${reason}`);
    this.name = "ServiceError";
    this.code = code;
    this.reason = reason;
  }
}

/**
 * StaleReportError is a numbered report the worker refused as stale (409):
 * it is not newer than the report the state holds for its process, or its
 * process is one the node moved away from. It changed nothing; the reason
 * names both reports' node_epoch and seq.
 */
export class StaleReportError extends ServiceError {
  constructor(what, reason) {
    super(what, 409, reason);
    this.name = "StaleReportError";
  }
}

/**
 * serviceError returns the error a reply carries, or null: a StaleReportError
 * for 409, else a ServiceError. A code that is not three digits, 100 to 999,
 * is 500 (anything else); the reason is cleaned (cleanReason).
 */
export function serviceError(msg, what) {
  const code = header(msg, H_ERROR_CODE);
  const reason = header(msg, H_ERROR);
  if (code === "" && reason === "") return null;
  const n = serviceCode(code);
  return n === 409 ? new StaleReportError(what, cleanReason(reason)) : new ServiceError(what, n, cleanReason(reason));
}

/** serviceCode is the code of a Nats-Service-Error-Code value: 500 unless it is three digits, 100 to 999. */
export function serviceCode(code) {
  return /^[1-9][0-9]{2}$/.test(code) ? Number(code) : 500;
}

/** MAX_REASON is the most bytes of a reason a client reports, as of an error message. */
export const MAX_REASON = 1024;

/**
 * cleanReason is a reason from a reply fit for a log line or a terminal: cut
 * to at most MAX_REASON bytes of UTF-8 at a character boundary (with "..."
 * after it), each control character written as an escape (\x1b below
 * U+0080, \u0085 above), as the Go client and the Rust crate do.
 */
export function cleanReason(s) {
  let out = "";
  let bytes = 0;
  for (const ch of s) {
    const n = Buffer.byteLength(ch);
    if (bytes + n > MAX_REASON) return out + "...";
    bytes += n;
    const c = ch.codePointAt(0);
    if (c < 0x20 || c === 0x7f) out += "\\x" + c.toString(16).padStart(2, "0");
    else if (c >= 0x80 && c <= 0x9f) out += "\\u" + c.toString(16).padStart(4, "0");
    else out += ch;
  }
  return out;
}

/** MAX_CHUNKS is the most chunks one get may announce. */
export const MAX_CHUNKS = 1 << 20;

/**
 * parseChunk reads a Flow-State-Chunk value, "<i>/<n>": decimal digits
 * without sign or leading zero, 1 <= i <= n <= MAX_CHUNKS; null when it is
 * not one.
 */
export function parseChunk(h) {
  const m = /^([1-9][0-9]*)\/([1-9][0-9]*)$/.exec(h ?? "");
  if (!m) return null;
  const [i, n] = [Number(m[1]), Number(m[2])];
  return i <= n && n <= MAX_CHUNKS ? { i, n } : null;
}

// The node_epoch of the Client of this process created last.
let lastEpoch = 0n;

/**
 * newEpoch returns the node_epoch of a new numbering Client: now in unix
 * ms, or one more than the previous Client's when that is not later, so
 * that no two Clients of one process share one.
 */
export function newEpoch() {
  const now = BigInt(Date.now());
  lastEpoch = now > lastEpoch ? now : lastEpoch + 1n;
  return lastEpoch;
}

/** MessageQueue keeps the messages of a subscription, in arrival order, for next. */
export class MessageQueue {
  constructor() {
    this.queue = [];
    this.waiter = null;
    this.error = null;
  }

  /** push is the subscription's callback. */
  push(err, msg) {
    if (err) this.error = err;
    else this.queue.push(msg);
    this.waiter?.();
  }

  /** next returns the next message, or null if none arrives within timeout ms. */
  async next(timeout) {
    if (this.queue.length === 0 && !this.error) {
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
    return this.queue.shift() ?? null;
  }
}

/**
 * getChunks sends a get with Flow-State-Chunks: 1 (and the headers of hdrs,
 * an object of name to value) to subject and returns its chunks: the
 * version they share and their bodies, in order. A reply with the service
 * error headers throws its ServiceError; a chunk that breaks PROTOCOL.md
 * (another version, out of order, no <i>/<n>, another content type), or a
 * chunk that does not come within timeout ms, throws.
 */
export async function getChunks(nc, subject, hdrs = {}, timeout = REQUEST_TIMEOUT) {
  const inbox = createInbox();
  const q = new MessageQueue();
  const sub = nc.subscribe(inbox, { callback: (err, msg) => q.push(err, msg) });
  const h = headers();
  for (const [k, v] of Object.entries({ ...hdrs, [H_CHUNKS]: "1" })) h.set(k, v);
  nc.publish(subject, Empty, { reply: inbox, headers: h });
  const bodies = [];
  let version;
  let total;
  try {
    for (;;) {
      const msg = await q.next(timeout);
      const what = `chunk ${bodies.length + 1}${total ? `/${total}` : ""} of a chunked get (${JSON.stringify(hdrs)})`;
      assert.ok(msg, `${what}: none within ${timeout} ms`);
      const err = serviceError(msg, "chunked get");
      if (err) throw err;
      assert.equal(header(msg, H_CONTENT_TYPE), MSGPACK, `${H_CONTENT_TYPE} of ${what}`);
      const v = parseVersion(msg);
      version ??= v;
      assert.deepEqual(v, version, `${what}: every chunk is of one version`);
      const c = parseChunk(header(msg, H_CHUNK));
      assert.ok(c, `${what}: ${H_CHUNK} ${JSON.stringify(header(msg, H_CHUNK))} is not <i>/<n>`);
      total ??= c.n;
      assert.equal(c.n, total, `${what}: the count of chunks changed`);
      assert.equal(c.i, bodies.length + 1, `${what}: chunks come in order`);
      bodies.push(msg.data);
      if (bodies.length === total) return { ...version, bodies };
    }
  } finally {
    sub.unsubscribe();
  }
}

/**
 * ascendingRanges requires the parts of a chunked get (each the flow ids a
 * chunk names, ascending) to hold ascending, disjoint ranges of ids.
 */
export function ascendingRanges(parts) {
  let last = -1;
  for (const [i, ids] of parts.entries()) {
    if (ids.length === 0) continue;
    assert.ok(ids[0] > last, `chunk ${i + 1} starts at flow ${ids[0]}, not above the previous chunk's ${last}`);
    last = ids.at(-1);
  }
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

/**
 * Client talks to one worker the way flownodes and frontends do.
 *
 * send and publishReport number the reports they send (protocol v3) unless
 * the Client is made with { numbered: false }: a report without nodeEpoch
 * gets the Client's (nodeEpoch, its creation time in unix ms, one per
 * Client), and one without seq the Client's next, strictly greater than
 * every seq it gave before, whatever the node. The worker then refuses as
 * stale (StaleReportError, 409; a published one is dropped) a report not
 * newer than the one it holds for the node from the same Client, and one of
 * a Client the node's reports have moved away from. A nodeEpoch or seq the
 * caller sets is sent as given, and a seq set in the Client's epoch raises
 * the Client's count to it. Unnumbered, a report is sent as given, applied
 * in arrival order as in v2. ack, publish and reject send bodies as they
 * are.
 */
export class Client {
  /**
   * @param {import("nats").NatsConnection} nc
   * @param {string} prefix
   * @param {{numbered?: boolean}} options
   */
  constructor(nc, prefix, { numbered = true } = {}) {
    this.nc = nc;
    this.prefix = prefix;
    this.epoch = ""; // the epoch of the first version seen
    this.lastAck = -1n; // the revision of the last ack
    this.touched = new Set(); // node ids (as strings) that reports named
    this.nodeEpoch = numbered ? newEpoch() : undefined; // the node_epoch of the reports it numbers
    this.seq = 0n; // the seq of the report it numbered last
  }

  /**
   * encode returns the body of r as send and publishReport send it (see
   * Client), numbered unless the Client is not. The Client's count moves
   * only once the report is encoded: a report that throws takes no seq.
   */
  encode(r) {
    if (this.nodeEpoch === undefined) return encodeReport(r);
    const n = { ...r, nodeEpoch: r.nodeEpoch ?? this.nodeEpoch, seq: r.seq ?? this.seq + 1n };
    const body = encodeReport(n);
    if (BigInt(n.nodeEpoch) === this.nodeEpoch && BigInt(n.seq) > this.seq) this.seq = BigInt(n.seq);
    return body;
  }

  /**
   * send sends the report r ({node, nodeEpoch, value, processedRows,
   * lastErrors, seq}: see encodeReport), numbered, as a request, and
   * returns the version of the state that holds it once the worker has
   * applied it. A refused report throws a ServiceError (400 bad input, 507
   * past a capacity limit) or a StaleReportError (409); each changed
   * nothing. A value outside its type throws before anything is sent.
   */
  async send(r) {
    const body = this.encode(r);
    this.touched.add(String(r.node));
    const msg = await this.request(this.heartbeat(r.node), body);
    const err = serviceError(msg, `report of node ${r.node}`);
    if (err) throw err;
    return parseVersion(msg);
  }

  /** publishReport sends the report r, numbered, without asking for an ack: a stale one is dropped. */
  publishReport(r) {
    this.publish(r.node, this.encode(r));
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

  /** getView sends a get with Flow-State-View: view, and Accept unless accept is "", and returns the reply. */
  async getView(view, accept = "") {
    const h = headers();
    h.set(H_VIEW, view);
    if (accept !== "") h.set(H_ACCEPT, accept);
    return this.request(`${this.prefix}.state.get`, Empty, h);
  }

  /**
   * getStats returns the flow stats (protocol v3, Flow-State-View: stats)
   * of a state of any size: it asks for the view in chunks, requires them
   * of one version, in order, each a stats view of an ascending range of
   * flow ids, and joins them into one view (see decodeStats), returned with
   * its version, the chunks' count and their bodies. A refused get throws
   * its ServiceError.
   */
  async getStats() {
    const got = await getChunks(this.nc, `${this.prefix}.state.get`, { [H_VIEW]: VIEW_STATS });
    this.sameEpoch(got, "a chunked get of the stats view");
    const parts = got.bodies.map((b) => decodeStats(b));
    ascendingRanges(parts.map(statsIds));
    const view = parts[0];
    for (const p of parts.slice(1)) {
      for (const [f, m] of Object.entries(p)) for (const [id, v] of m) view[f].set(id, v);
    }
    return { epoch: got.epoch, revision: got.revision, view, chunks: got.bodies.length, bodies: got.bodies };
  }

  /**
   * getStatsJSON returns the flow stats as the worker's JSON, in one
   * message (a view past the max payload throws a ServiceError 413), with
   * its version and body.
   */
  async getStatsJSON() {
    const msg = await this.getView(VIEW_STATS, JSON_TYPE);
    const err = serviceError(msg, "get of the stats view in JSON");
    if (err) throw err;
    return this.aggregate(msg, JSON_TYPE, "a get of the stats view in JSON");
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
export class Updates extends MessageQueue {
  constructor(client) {
    super();
    this.client = client;
    this.sub = null;
  }

  /** next returns the next update, or null if none arrives within timeout ms. */
  async next(timeout = MESSAGE_TIMEOUT) {
    const msg = await super.next(timeout);
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
