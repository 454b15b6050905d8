// Package wait is the project's one way for a test to wait for a fact it
// cannot be told about directly (a counter an asynchronous server updates, a
// page a worker refreshes on its own schedule): Until checks a condition
// until it holds, and fails the test with the condition's last reason once
// the bound has passed. A test that can wait on an ack, a revision or a
// message waits on that instead.
//
// It is for tests only.
package wait

import (
	"testing"
	"time"
)

// Cond reports whether the awaited fact holds and, when it does not, why
// (the reason Until fails with if the fact never comes).
type Cond func() (ok bool, reason string)

// Until calls cond every interval until it holds, and fails tb with cond's
// last reason when it does not hold within timeout. cond runs at least once,
// and once more at the bound, so a fact reached during the last interval is
// seen. It is called on the test's goroutine.
func Until(tb testing.TB, timeout, interval time.Duration, cond Cond) {
	tb.Helper()
	Within(timeout, interval, cond, func(reason string) {
		tb.Helper()
		tb.Fatalf("not within %v: %s", timeout, reason)
	})
}

// Within is Until without a test: it calls cond every interval until it
// holds, or calls fail with cond's last reason once timeout has passed. It
// reports whether cond held, for callers that go on either way (a helper
// that returns an error instead of failing).
func Within(timeout, interval time.Duration, cond Cond, fail func(reason string)) bool {
	deadline := time.Now().Add(timeout)
	for {
		ok, reason := cond()
		if ok {
			return true
		}
		if !time.Now().Before(deadline) {
			fail(reason)
			return false
		}
		time.Sleep(min(interval, time.Until(deadline)+time.Millisecond))
	}
}
