package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if they leave goroutines behind: the
// worker starts an embedded server, a metrics server, watchers and the
// actors of its group, and each must be stopped by the shutdown path.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
