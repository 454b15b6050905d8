// checker.mjs: how the scripts run their checks and say how they went: one
// line per check ("ok   <name> (<ms> ms) # <note>" or "FAIL <name> (<ms>
// ms): <why>"), then a last line "N passed, N failed", which the Go tests
// read; exit status 0 when every check passed, 1 when one failed, 2 on bad
// usage or when the script cannot connect.

import { AssertionError } from "node:assert/strict";
import { connect } from "nats";

export const hex = (b) => Buffer.from(b).toString("hex");

/**
 * oneLine is an error's message on one line: with its stack for an error
 * other than a failed assertion (a bug of the script, or an error thrown
 * where none was expected).
 */
export function oneLine(err) {
  const msg = err instanceof Error ? (err instanceof AssertionError ? err.message : err.stack) : err;
  return String(msg).replace(/\s*\n\s*/g, " ");
}

/** watchdog ends the run, failed, when it has not finished within ms. */
export function watchdog(ms) {
  setTimeout(() => {
    console.log(`FAIL run: not finished within ${ms} ms`);
    process.exit(1);
  }, ms).unref();
}

/** Checker runs checks one after the other and counts them. */
export class Checker {
  constructor() {
    this.passed = 0;
    this.failed = 0;
  }

  /**
   * check runs fn, then after (if given) whether fn passed or not, and
   * prints the check's line: a check passes when neither throws. fn may
   * return a note for its line.
   */
  async check(name, fn, after) {
    const started = Date.now();
    let error;
    let note;
    try {
      note = await fn();
    } catch (err) {
      error = oneLine(err);
    }
    if (after) {
      try {
        await after();
      } catch (err) {
        error = error === undefined ? `the reset after the check: ${oneLine(err)}` : `${error} (and the reset after it: ${oneLine(err)})`;
      }
    }
    const ms = `(${Date.now() - started} ms)`;
    if (error === undefined) {
      this.passed++;
      console.log(`ok   ${name} ${ms}${note ? ` # ${oneLine(note)}` : ""}`);
    } else {
      this.failed++;
      console.log(`FAIL ${name} ${ms}: ${error}`);
    }
  }

  /** connect connects to url, or ends the run (status 2) when it cannot. */
  async connect(url, options) {
    try {
      return await connect({ servers: url, timeout: 5000, ...options });
    } catch (err) {
      this.abort(`connect to ${url}: ${oneLine(err)}`);
    }
  }

  /** abort ends the run (status 2) with one more failed line. */
  abort(why) {
    console.log(`FAIL ${why}`);
    console.log(`${this.passed} passed, ${this.failed + 1} failed`);
    process.exit(2);
  }

  /** finish drains nc, prints the last line and exits. */
  async finish(nc) {
    await nc?.drain().catch((err) => console.log(`# drain: ${oneLine(err)}`));
    console.log(`${this.passed} passed, ${this.failed} failed`);
    process.exit(this.failed === 0 ? 0 : 1);
  }
}
