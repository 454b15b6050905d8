// wire.mjs: the msgpack and JSON forms of PROTOCOL.md, written with
// @msgpack/msgpack and nothing of the worker's code.
//
// @msgpack/msgpack 3.x encodes a plain object's own keys as strings and a JS
// Map as an empty map (it reads Object.keys, and a Map has none), and with
// useBigInt64 it writes safe integers at or above 2^32 as float64. So every
// scalar here goes through the library's encode, with useBigInt64 only for
// BigInt values, and only the headers of maps and arrays that hold an integer
// key, a repeated key or a BigInt are written by hand (pack below).

import assert from "node:assert/strict";
import { Encoder, decode } from "@msgpack/msgpack";

/** The aggregate's fields, in their wire order. */
export const FIELDS = ["state_size", "last_exec_time_map", "start_time_map"];

export const UINT32_MAX = 2 ** 32 - 1;
export const UINT64_MAX = 2n ** 64n - 1n;
export const INT64_MIN = -(2n ** 63n);
export const INT64_MAX = 2n ** 63n - 1n;

/**
 * Entries is a msgpack map written pair by pair in the given order: keys of
 * any type (integers, strings, BigInt), repeats allowed.
 */
export class Entries {
  /** @param {Array<[unknown, unknown]>} pairs */
  constructor(pairs) {
    this.pairs = pairs;
  }
}

/** Float is a number written as a msgpack float (bits 32 or 64), even when it is an integer. */
export class Float {
  constructor(value, bits = 64) {
    this.value = value;
    this.bits = bits;
  }
}

/** entries builds an Entries from key, value, key, value, ... */
export function entries(...kv) {
  const pairs = [];
  for (let i = 0; i < kv.length; i += 2) pairs.push([kv[i], kv[i + 1]]);
  return new Entries(pairs);
}

// One encoder of each kind, reused: encode() returns a copy of its bytes.
const plain = new Encoder();
const wide = new Encoder({ useBigInt64: true });
const float64 = new Encoder({ forceIntegerToFloat: true });
const float32 = new Encoder({ forceIntegerToFloat: true, forceFloat32: true });

function isContainer(v) {
  return v !== null && typeof v === "object" && !ArrayBuffer.isView(v) && !(v instanceof Date);
}

/** needsPieces tells whether the library cannot encode v in one call. */
function needsPieces(v) {
  if (typeof v === "bigint" || v instanceof Entries || v instanceof Map || v instanceof Float) return true;
  if (Array.isArray(v)) return v.some(needsPieces);
  if (isContainer(v)) return Object.values(v).some(needsPieces);
  return false;
}

function concat(parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function header(n, fix, b16, b32) {
  if (n < 16) return Uint8Array.of(fix | n);
  if (n < 0x10000) return Uint8Array.of(b16, n >> 8, n & 0xff);
  return Uint8Array.of(b32, n >>> 24, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff);
}

/**
 * pack encodes v as msgpack: with one call of the library's encode when it
 * can, else container by container (Entries and Map keep their keys' types;
 * plain objects have string keys) with the library encoding every scalar.
 * A BigInt is written as uint64 or int64 (0xcf, 0xd3) whatever its value,
 * a Float as float32 or float64 (0xca, 0xcb).
 */
export function pack(v) {
  if (!needsPieces(v)) return plain.encode(v);
  if (typeof v === "bigint") return wide.encode(v);
  if (v instanceof Float) return (v.bits === 32 ? float32 : float64).encode(v.value);
  if (v instanceof Map) return pack(new Entries([...v]));
  if (Array.isArray(v)) return concat([header(v.length, 0x90, 0xdc, 0xdd), ...v.map(pack)]);
  const pairs = v instanceof Entries ? v.pairs : Object.entries(v);
  return concat([header(pairs.length, 0x80, 0xde, 0xdf), ...pairs.flatMap(([k, x]) => [pack(k), pack(x)])]);
}

/** nest returns arrays nested depth levels deep, the innermost empty. */
export function nest(depth) {
  let v = [];
  for (let i = 1; i < depth; i++) v = [v];
  return v;
}

// ---- the aggregate as a value: FlowStateValue ----

/**
 * state builds a FlowStateValue: three Maps from flow id (number) to value
 * (BigInt). Arguments are objects or Maps from flow id to number or BigInt.
 */
export function state(stateSize = {}, lastExec = {}, startTime = {}) {
  const norm = (m) => {
    const src = m instanceof Map ? [...m] : Object.entries(m);
    return new Map(src.map(([k, v]) => [Number(k), BigInt(v)]).sort((a, b) => a[0] - b[0]));
  };
  return { state_size: norm(stateSize), last_exec_time_map: norm(lastExec), start_time_map: norm(startTime) };
}

/** merge is the seed's aggregate of each node's last report: per flow and field, the max over the nodes. */
export function merge(reports) {
  const agg = state();
  for (const r of reports.values()) {
    for (const f of FIELDS) {
      for (const [id, v] of r[f]) {
        const old = agg[f].get(id);
        if (old === undefined || v > old) agg[f].set(id, v);
      }
    }
  }
  return state(agg.state_size, agg.last_exec_time_map, agg.start_time_map);
}

/** show writes a FlowStateValue for messages. */
export function show(s) {
  return JSON.stringify(Object.fromEntries(FIELDS.map((f) => [f, Object.fromEntries([...s[f]].map(([k, v]) => [k, String(v)]))])));
}

/**
 * shortest turns a BigInt that is a safe integer into a number, which the
 * library writes in its shortest form (a BigInt always takes 9 bytes).
 */
export function shortest(v) {
  return typeof v === "bigint" && v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
}

/**
 * canonicalMsgpack is the aggregate as PROTOCOL.md writes it: the three
 * string keys in order, integer flow ids ascending, every integer in its
 * shortest form.
 */
export function canonicalMsgpack(s) {
  return pack(new Entries(FIELDS.map((f) => [f, new Entries([...s[f]].sort((a, b) => a[0] - b[0]).map(([k, v]) => [k, shortest(v)]))])));
}

/** serdeJSON is what serde_json writes for FlowStateValue. */
export function serdeJSON(s) {
  const field = (f) => `"${f}":{` + [...s[f]].sort((a, b) => a[0] - b[0]).map(([k, v]) => `"${k}":${v}`).join(",") + "}";
  return "{" + FIELDS.map(field).join(",") + "}";
}

/**
 * decodeTraced decodes msgpack with the library, integers past 2^53 as
 * BigInt, and returns the value with every map key in wire order, as the
 * decoder's mapKeyConverter sees them (a JS object would put integer-like
 * keys first, ascending, and keep one of two equal keys).
 */
function decodeTraced(body) {
  const keys = [];
  const value = decode(body, {
    useBigInt64: true,
    mapKeyConverter: (k) => {
      keys.push(k);
      return typeof k === "bigint" ? String(k) : k;
    },
  });
  return { value, keys };
}

/**
 * decodeAggregate decodes a msgpack aggregate with the library and returns
 * the FlowStateValue. It throws unless the body is one map with exactly the
 * three string keys in order, each a map whose keys are msgpack integers
 * (not strings) in ascending order, every value an integer, and no trailing
 * bytes. The key order is read from the decoder's mapKeyConverter, which
 * sees every key in wire order.
 */
export function decodeAggregate(body) {
  const { value, keys } = decodeTraced(body);
  if (!isContainer(value) || Array.isArray(value)) throw new Error(`aggregate is not a map: ${value}`);
  // The trace is: field name, its flow ids, field name, its flow ids, ...
  const names = [];
  let prev = -1;
  for (const k of keys) {
    if (typeof k === "string" && FIELDS.includes(k) && names.length < FIELDS.length && FIELDS[names.length] === k) {
      names.push(k);
      prev = -1;
      continue;
    }
    if (names.length === 0) throw new Error(`aggregate starts with key ${JSON.stringify(String(k))}, not ${FIELDS[0]}`);
    if (typeof k !== "number" || !Number.isInteger(k)) {
      throw new Error(`flow id key ${typeof k === "string" ? JSON.stringify(k) : String(k)} in ${names.at(-1)} is a ${typeof k}, not a msgpack integer of its shortest form`);
    }
    if (k < 0 || k > UINT32_MAX) throw new Error(`flow id ${k} in ${names.at(-1)} is outside uint32`);
    if (k <= prev) throw new Error(`flow ids of ${names.at(-1)} not ascending: ${k} after ${prev}`);
    prev = k;
  }
  if (names.join() !== FIELDS.join() || Object.keys(value).join() !== FIELDS.join()) {
    throw new Error(`aggregate keys ${JSON.stringify(Object.keys(value))} (wire order ${JSON.stringify(names)}), want ${JSON.stringify(FIELDS)}`);
  }
  const maps = FIELDS.map((f) => {
    const m = value[f];
    if (!isContainer(m) || Array.isArray(m)) throw new Error(`${f} is not a map`);
    for (const [k, v] of Object.entries(m)) {
      if (typeof v !== "bigint" && !Number.isSafeInteger(v)) throw new Error(`${f}[${k}] = ${v} is not an integer`);
      if (f === "state_size" && v < 0) throw new Error(`${f}[${k}] = ${v} is negative`);
    }
    return m;
  });
  return state(...maps);
}

/** decodeDelta decodes a delta body: {base, flows: {id: [size|nil, last|nil, start|nil]}}. */
export function decodeDelta(body) {
  const { value: d, keys } = decodeTraced(body);
  assert.deepEqual(keys.slice(0, 2), ["base", "flows"], "delta keys in order");
  const ids = keys.slice(2);
  for (let i = 1; i < ids.length; i++) assert.ok(ids[i] > ids[i - 1], `delta flow ids not ascending: ${ids[i]} after ${ids[i - 1]}`);
  for (const id of ids) assert.equal(typeof id, "number", `delta flow id ${id} is not a msgpack integer`);
  const flows = Object.entries(d.flows).map(([id, arr]) => {
    assert.ok(Array.isArray(arr) && arr.length === 3, `flow ${id}: not an array of 3`);
    return [Number(id), arr];
  });
  return { base: BigInt(d.base), flows };
}

// ---- protocol v3: a flow's health, numbered reports, the stats view ----

/** The stats view's fields, in their wire order: the aggregate's, then the health's. */
export const STATS_FIELDS = [...FIELDS, "processed_rows", "last_errors"];
/** The keys of an error in the stats view, in their wire order. */
export const STATS_ERROR_KEYS = ["time", "node_id", "message"];
/** Errors a node reports per flow, and the stats view keeps per flow. */
export const MAX_FLOW_ERRORS = 3;
/** Bytes of UTF-8 of an error message, at least 1. */
export const MAX_ERROR_MESSAGE = 1024;

const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder("utf-8", { fatal: true });

/**
 * cutMessage cuts an error message to MAX_ERROR_MESSAGE bytes of UTF-8 at a
 * character boundary, as clients do before they send it (PROTOCOL.md v3).
 */
export function cutMessage(message) {
  const b = utf8.encode(message);
  if (b.length <= MAX_ERROR_MESSAGE) return message;
  let end = MAX_ERROR_MESSAGE;
  while (end > 0 && (b[end] & 0xc0) === 0x80) end--; // b[end] continues a character that does not fit
  return utf8Strict.decode(b.subarray(0, end));
}

/** integer returns v (a safe integer or a BigInt) as a BigInt within [lo, hi], or throws naming what. */
function integer(v, lo, hi, what) {
  if (typeof v !== "bigint" && !Number.isSafeInteger(v)) throw new TypeError(`${what}: ${String(v)} is not an integer (a safe integer number or a BigInt)`);
  const b = BigInt(v);
  if (b < lo || b > hi) throw new RangeError(`${what}: ${b} is outside [${lo}, ${hi}]`);
  return b;
}

/** flowEntries returns a Map or object from flow id to value as [id, value] pairs, ids ascending, each once. */
function flowEntries(m, what) {
  if (m === null || typeof m !== "object") throw new TypeError(`${what}: not a Map or an object`);
  const pairs = (m instanceof Map ? [...m] : Object.entries(m)).map(([k, v]) => {
    const id = typeof k === "string" && /^(0|[1-9][0-9]*)$/.test(k) ? Number(k) : k;
    return [Number(integer(id, 0n, BigInt(UINT32_MAX), `${what}: flow id ${JSON.stringify(String(k))}`)), v];
  });
  pairs.sort((a, b) => a[0] - b[0]);
  for (let i = 1; i < pairs.length; i++) if (pairs[i][0] === pairs[i - 1][0]) throw new RangeError(`${what}: flow ${pairs[i][0]} named twice`);
  return pairs;
}

/**
 * health checks a report's v3 fields and returns them in wire form:
 * processedRows [[id, BigInt]] and lastErrors [[id, [{time: BigInt,
 * message}]]] with ids ascending, messages cut to MAX_ERROR_MESSAGE bytes,
 * and seq a BigInt; each undefined when absent (undefined or null).
 */
export function health(r) {
  const h = {};
  if (r.processedRows != null) {
    h.processedRows = flowEntries(r.processedRows, "processed_rows").map(([id, v]) => [id, integer(v, 0n, UINT64_MAX, `processed_rows[${id}]`)]);
  }
  if (r.lastErrors != null) {
    h.lastErrors = flowEntries(r.lastErrors, "last_errors").map(([id, errs]) => {
      if (!Array.isArray(errs)) throw new TypeError(`last_errors[${id}]: not an array of errors`);
      if (errs.length > MAX_FLOW_ERRORS) throw new RangeError(`last_errors[${id}]: ${errs.length} errors, at most ${MAX_FLOW_ERRORS}`);
      return [
        id,
        errs.map((e, i) => {
          const what = `last_errors[${id}][${i}]`;
          if (e === null || typeof e !== "object") throw new TypeError(`${what}: not an object of time and message`);
          if (typeof e.message !== "string" || e.message === "") throw new TypeError(`${what}.message: not a non-empty string`);
          return { time: integer(e.time, INT64_MIN, INT64_MAX, `${what}.time`), message: cutMessage(e.message) };
        }),
      ];
    });
  }
  if (r.seq != null) h.seq = integer(r.seq, 0n, UINT64_MAX, "seq");
  return h;
}

/**
 * encodeReport writes a heartbeat report as PROTOCOL.md's encoders do:
 * node_id, node_epoch when set, the three maps of r.value (a
 * FlowStateValue; empty when absent), then processed_rows, last_errors
 * (each error a map of time and message) and seq when set; integer flow
 * ids ascending, every integer in its shortest form. r is {node, nodeEpoch,
 * value, processedRows, lastErrors, seq} (see health). A value outside its
 * type throws, and nothing is written.
 */
export function encodeReport(r) {
  const pairs = [["node_id", shortest(integer(r.node, 0n, UINT64_MAX, "node_id"))]];
  if (r.nodeEpoch != null) pairs.push(["node_epoch", shortest(integer(r.nodeEpoch, 0n, UINT64_MAX, "node_epoch"))]);
  const v = r.value ?? state();
  for (const f of FIELDS) {
    const [lo, hi] = f === "state_size" ? [0n, UINT64_MAX] : [INT64_MIN, INT64_MAX];
    pairs.push([f, new Entries(flowEntries(v[f], f).map(([id, x]) => [id, shortest(integer(x, lo, hi, `${f}[${id}]`))]))]);
  }
  const h = health(r);
  if (h.processedRows) pairs.push(["processed_rows", new Entries(h.processedRows.map(([id, x]) => [id, shortest(x)]))]);
  if (h.lastErrors) {
    const errs = (list) => list.map((e) => new Entries([["time", shortest(e.time)], ["message", e.message]]));
    pairs.push(["last_errors", new Entries(h.lastErrors.map(([id, list]) => [id, errs(list)]))]);
  }
  if (h.seq !== undefined) pairs.push(["seq", shortest(h.seq)]);
  return pack(new Entries(pairs));
}

/** emptyStats is the stats view of the empty state. */
export function emptyStats() {
  return { ...state(), processed_rows: new Map(), last_errors: new Map() };
}

/** statsIds returns the flow ids a stats view names in any of its maps, ascending, each once. */
export function statsIds(view) {
  return [...new Set(STATS_FIELDS.flatMap((f) => [...view[f].keys()]))].sort((a, b) => a - b);
}

/**
 * mergeStats is the stats view of an aggregate and the health of the
 * nodes (an iterable of [node_id, r], r as for health): per flow the most
 * rows over the nodes, and the 3 newest errors over the nodes, newest
 * first, equal times in ascending node_id, then in the node's own order.
 */
export function mergeStats(aggregate, nodes) {
  const view = { ...state(aggregate.state_size, aggregate.last_exec_time_map, aggregate.start_time_map), processed_rows: new Map(), last_errors: new Map() };
  const errs = new Map(); // flow id -> [{time, node_id, message, at}]
  for (const [node, r] of nodes) {
    const h = health(r);
    for (const [id, rows] of h.processedRows ?? []) {
      const old = view.processed_rows.get(id);
      if (old === undefined || rows > old) view.processed_rows.set(id, rows);
    }
    for (const [id, list] of h.lastErrors ?? []) {
      const all = errs.get(id) ?? [];
      list.forEach((e, at) => all.push({ time: e.time, node_id: BigInt(node), message: e.message, at }));
      errs.set(id, all);
    }
  }
  const order = (a, b) => (a.time !== b.time ? (a.time > b.time ? -1 : 1) : a.node_id !== b.node_id ? (a.node_id < b.node_id ? -1 : 1) : a.at - b.at);
  for (const id of [...errs.keys()].sort((a, b) => a - b)) {
    const newest = errs.get(id).sort(order).slice(0, MAX_FLOW_ERRORS);
    if (newest.length > 0) view.last_errors.set(id, newest.map(({ time, node_id, message }) => ({ time, node_id, message })));
  }
  view.processed_rows = new Map([...view.processed_rows].sort((a, b) => a[0] - b[0]));
  return view;
}

/**
 * decodeStats decodes a msgpack stats view (Flow-State-View: stats) with
 * the library into a plain object: the aggregate's three Maps, and
 * processed_rows (a Map from flow id to BigInt) and last_errors (a Map from
 * flow id to an array of {time, node_id, message}, times and node ids
 * BigInt). It throws unless the body is one map of exactly the five string
 * keys in order, each a map whose keys are msgpack integers (not strings)
 * ascending, every error a map of time, node_id and message in that order,
 * and no trailing bytes. As decodeAggregate, it reads the key order from the
 * decoder's mapKeyConverter, which sees every key in wire order.
 */
export function decodeStats(body) {
  const { value, keys } = decodeTraced(body);
  const isMap = (m) => isContainer(m) && !Array.isArray(m);
  if (!isMap(value)) throw new Error(`stats view is not a map: ${String(value)}`);
  const view = emptyStats();
  for (const f of STATS_FIELDS) {
    const m = value[f];
    if (!isMap(m)) throw new Error(`stats view: ${f} is ${m === undefined ? "missing" : "not a map"}`);
    for (const [k, v] of Object.entries(m)) {
      const id = Number(k);
      if (!Number.isInteger(id) || id < 0 || id > UINT32_MAX) throw new Error(`stats view: flow id ${JSON.stringify(k)} in ${f} is not a uint32`);
      if (f === "last_errors") {
        if (!Array.isArray(v) || v.length === 0 || v.length > MAX_FLOW_ERRORS) throw new Error(`stats view: last_errors[${k}] is not an array of 1 to ${MAX_FLOW_ERRORS} errors`);
        view[f].set(
          id,
          v.map((e, i) => {
            const what = `stats view: last_errors[${k}][${i}]`;
            if (!isMap(e)) throw new Error(`${what} is not a map`);
            if (typeof e.message !== "string" || e.message === "") throw new Error(`${what}.message is not a non-empty string`);
            return { time: integer(e.time, INT64_MIN, INT64_MAX, `${what}.time`), node_id: integer(e.node_id, 0n, UINT64_MAX, `${what}.node_id`), message: e.message };
          }),
        );
        continue;
      }
      const [lo, hi] = f === "state_size" || f === "processed_rows" ? [0n, UINT64_MAX] : [INT64_MIN, INT64_MAX];
      view[f].set(id, integer(v, lo, hi, `stats view: ${f}[${k}]`));
    }
    view[f] = new Map([...view[f]].sort((a, b) => a[0] - b[0]));
  }
  // The wire order of the keys: each field name, then its flow ids
  // ascending as msgpack integers, each error's keys after its flow id.
  const want = STATS_FIELDS.flatMap((f) => [f, ...[...view[f]].flatMap(([id, v]) => (f === "last_errors" ? [id, ...v.flatMap(() => STATS_ERROR_KEYS)] : [id]))]);
  const shown = (list) => list.map((k) => (typeof k === "string" ? JSON.stringify(k) : `${typeof k} ${k}`)).join(" ");
  if (keys.length !== want.length || keys.some((k, i) => k !== want[i])) {
    throw new Error(`stats view keys in wire order are [${shown(keys.slice(0, 40))}${keys.length > 40 ? " ..." : ""}], want [${shown(want.slice(0, 40))}${want.length > 40 ? " ..." : ""}]`);
  }
  return view;
}

/**
 * encodeStats writes a stats view as the worker does: the five string keys
 * in order, integer flow ids ascending, each error a map of time, node_id
 * and message, every integer in its shortest form.
 */
export function encodeStats(view) {
  const ints = (m) => new Entries([...m].sort((a, b) => a[0] - b[0]).map(([id, v]) => [id, shortest(BigInt(v))]));
  const errs = (list) => list.map((e) => new Entries([["time", shortest(BigInt(e.time))], ["node_id", shortest(BigInt(e.node_id))], ["message", e.message]]));
  return pack(
    new Entries([
      ...FIELDS.map((f) => [f, ints(view[f])]),
      ["processed_rows", ints(view.processed_rows)],
      ["last_errors", new Entries([...view.last_errors].sort((a, b) => a[0] - b[0]).map(([id, list]) => [id, errs(list)]))],
    ]),
  );
}

/**
 * statsJSON writes a stats view as the worker's JSON: fields in order, flow
 * ids as strings ascending, no spaces, each error {"time":...,"node_id":...,
 * "message":...} with the message escaped as serde_json escapes a string.
 * JSON.stringify escapes a string as serde_json does (", \ and the control
 * characters, \b \f \n \r \t in short, the others as \u00xx in lowercase
 * hex; nothing else), for a string that is valid Unicode, as every message
 * is.
 */
export function statsJSON(view) {
  const obj = (m, val) => "{" + [...m].sort((a, b) => a[0] - b[0]).map(([id, v]) => `"${id}":${val(v)}`).join(",") + "}";
  const err = (e) => `{"time":${BigInt(e.time)},"node_id":${BigInt(e.node_id)},"message":${JSON.stringify(e.message)}}`;
  const fields = [...FIELDS, "processed_rows"].map((f) => `"${f}":${obj(view[f], (v) => String(BigInt(v)))}`);
  fields.push(`"last_errors":${obj(view.last_errors, (list) => "[" + list.map(err).join(",") + "]")}`);
  return "{" + fields.join(",") + "}";
}
