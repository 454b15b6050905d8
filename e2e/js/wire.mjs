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
 * decodeAggregate decodes a msgpack aggregate with the library and returns
 * the FlowStateValue. It throws unless the body is one map with exactly the
 * three string keys in order, each a map whose keys are msgpack integers
 * (not strings) in ascending order, every value an integer, and no trailing
 * bytes. The key order is read from the decoder's mapKeyConverter, which
 * sees every key in wire order.
 */
export function decodeAggregate(body) {
  const keys = [];
  const value = decode(body, {
    useBigInt64: true,
    mapKeyConverter: (k) => {
      keys.push(k);
      return typeof k === "bigint" ? String(k) : k;
    },
  });
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
  const keys = [];
  const d = decode(body, {
    useBigInt64: true,
    mapKeyConverter: (k) => {
      keys.push(k);
      return typeof k === "bigint" ? String(k) : k;
    },
  });
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
