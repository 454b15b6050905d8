#!/usr/bin/env node
// conformance.mjs: a client of the flowstate worker written from
// docs/PROTOCOL.md alone, in JavaScript, with the npm packages nats (the
// Node NATS client) and @msgpack/msgpack, so that another language, another
// NATS client and another msgpack library check every behaviour of the wire
// contract.
//
//   node conformance.mjs [NATS_URL [PREFIX]]
//
// NATS_URL defaults to $FLOWSTATE_NATS_URL, then nats://127.0.0.1:4222;
// PREFIX to $FLOWSTATE_PREFIX, then "flow". The worker must be fresh (no
// report applied yet), memory-backed, with the default flags but --prefix.
// It prints one line per check and a last line "N passed, N failed", and
// exits 1 if a check failed, 2 on bad usage or when it cannot connect.

import { connect } from "nats";
import { Client } from "./client.mjs";
import { checks, reset } from "./checks.mjs";

const CHECK_TIMEOUT = 60_000; // one check, and the reset after it
const RUN_TIMEOUT = 240_000; // the whole run

const [url = process.env.FLOWSTATE_NATS_URL || "nats://127.0.0.1:4222", prefix = process.env.FLOWSTATE_PREFIX || "flow", ...extra] = process.argv.slice(2);
if (extra.length > 0 || url === "--help" || url === "-h") {
  console.error("usage: node conformance.mjs [NATS_URL [PREFIX]]");
  process.exit(extra.length > 0 ? 2 : 0);
}

const watchdog = setTimeout(() => {
  console.log(`FAIL run: not finished within ${RUN_TIMEOUT} ms`);
  process.exit(1);
}, RUN_TIMEOUT);
watchdog.unref();

/** within rejects when promise does not settle within ms. */
function within(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not done within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function oneLine(err) {
  const msg = err instanceof Error ? err.message : String(err);
  return msg.replace(/\s*\n\s*/g, " ");
}

let nc;
try {
  nc = await connect({ servers: url, name: "flowstate-js-conformance", timeout: 5000, maxReconnectAttempts: 0 });
} catch (err) {
  console.log(`FAIL connect to ${url}: ${oneLine(err)}`);
  console.log("0 passed, 1 failed");
  process.exit(2);
}
console.log(`# ${url} prefix ${prefix}; node ${process.version}; nats ${nc.info?.version ?? "?"} max_payload ${nc.info?.max_payload ?? "?"}`);

const c = new Client(nc, prefix);
let passed = 0;
let failed = 0;
for (const [i, [name, fn]] of checks().entries()) {
  const started = Date.now();
  let note;
  let error;
  try {
    note = await within(fn(c), CHECK_TIMEOUT, name);
  } catch (err) {
    error = err;
  }
  // Start the next check from the empty aggregate (the first check needs
  // the fresh worker, and runs before any reset).
  try {
    await within(reset(c), CHECK_TIMEOUT, "reset");
  } catch (err) {
    error = error === undefined ? new Error(`reset after the check: ${oneLine(err)}`) : new Error(`${oneLine(error)} (and the reset after it: ${oneLine(err)})`);
  }
  const ms = `(${Date.now() - started} ms)`;
  const n = String(i + 1).padStart(2);
  if (error === undefined) {
    passed++;
    console.log(`ok   ${n} ${name} ${ms}${note ? ` # ${oneLine(note)}` : ""}`);
  } else {
    failed++;
    console.log(`FAIL ${n} ${name} ${ms}: ${oneLine(error)}`);
  }
}

await within(nc.drain(), 5000, "drain").catch((err) => console.log(`# drain: ${oneLine(err)}`));
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
