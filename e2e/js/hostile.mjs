#!/usr/bin/env node
// hostile.mjs: checks this client against testdata/vectors/hostile.json, the
// replies a peer that is not the worker could send (chunk headers, error
// codes, error reasons, version headers, get bodies), which the Go client
// and the Rust crate read the same way. This client's aggregate decoder
// checks the worker's canonical form, so it must refuse every body the
// vectors refuse and read the canonical ones as they say; it has no reader of
// a delta's headers, so the deltas are the other clients'. It needs no
// server.
//
//   node hostile.mjs VECTORS_DIR
//
// It prints one line per check and a last line "N passed, N failed", and
// exits 1 if a check failed, 2 on bad usage.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Checker } from "./checker.mjs";
import { MAX_CHUNKS, cleanReason, parseChunk, parseVersion, serviceCode } from "./client.mjs";
import { decodeAggregate, state } from "./wire.mjs";

if (process.argv.length !== 3) {
  console.error("usage: node hostile.mjs VECTORS_DIR");
  process.exit(2);
}
const v = JSON.parse(readFileSync(join(process.argv[2], "hostile.json"), "utf8"));
const checker = new Checker();

await checker.check("max_chunks", () => assert.equal(MAX_CHUNKS, v.max_chunks));
await checker.check("chunk headers", () => {
  for (const c of v.chunk_headers) {
    const want = c.n === undefined ? null : { i: c.i, n: c.n };
    assert.deepEqual(parseChunk(c.header), want, JSON.stringify(c.header));
  }
  return `${v.chunk_headers.length} cases`;
});
await checker.check("error codes", () => {
  for (const c of v.error_codes) assert.equal(serviceCode(c.code), c.want, JSON.stringify(c.code));
  return `${v.error_codes.length} cases`;
});
await checker.check("error reasons", () => {
  for (const c of v.reasons) {
    const reason = c.reason.repeat(c.repeat ?? 1);
    assert.equal(cleanReason(reason), c.want, JSON.stringify(reason.slice(0, 40)));
  }
  return `${v.reasons.length} cases`;
});
await checker.check("version headers", () => {
  for (const c of v.headers) {
    const msg = { headers: new Map(Object.entries(c.headers)) };
    if (c.refused !== undefined) {
      assert.throws(() => parseVersion(msg), assert.AssertionError, c.name);
      continue;
    }
    assert.deepEqual(parseVersion(msg), { epoch: c.epoch, revision: BigInt(c.revision) }, c.name);
  }
  return `${v.headers.length} cases`;
});
await checker.check("bodies: refused ones refused, canonical ones read", () => {
  const fields = ["state_size", "last_exec_time", "start_time"];
  let n = 0;
  for (const c of v.bodies) {
    const body = Uint8Array.from(Buffer.from(c.msgpack, "hex"));
    if (c.refused !== undefined) {
      assert.throws(() => decodeAggregate(body), undefined, c.name);
      n++;
    } else if (c.canonical) {
      const want = state(...fields.map((f) => new Map(c.flows.filter((x) => x[f] !== undefined).map((x) => [x.id, BigInt(x[f])]))));
      assert.deepEqual(decodeAggregate(body), want, c.name);
      n++;
    }
  }
  return `${n} of ${v.bodies.length} cases`;
});
await checker.finish();
