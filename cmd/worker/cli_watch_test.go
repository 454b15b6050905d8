package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/consumer"
)

func TestWatchChangesPrintsOnlyTheFlowsThatChanged(t *testing.T) {
	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{PublishInterval: 0})
	c := testClient(t, srv, "flow")
	sendFlows(t, c, 1, flow(1, 1024, 1, 0, all), flow(2, 2048, 1, 0, all))
	out := newLineWriter()
	var errOut strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"watch", "--nats-url", srv.ClientURL(), "--changes", "--count", "2"}, noEnv, out, &errOut)
	}()
	// The first state lists every flow: a header and two lines.
	require.Contains(t, out.next(t), "flows 2")
	require.Contains(t, out.next(t), "FLOW")
	require.Regexp(t, `^1 `, out.next(t))
	require.Regexp(t, `^2 `, out.next(t))

	v := sendFlows(t, c, 1, flow(2, 4096, 2, 0, all), flow(3, 1, 1, 0, all)) // 1 leaves, 2 changes, 3 comes
	assert.Contains(t, out.next(t), fmt.Sprintf("revision %d ", v.Revision), "one update per report")
	assert.Contains(t, out.next(t), "FLOW")
	assert.Regexp(t, `^1 +left`, out.next(t))
	assert.Regexp(t, `^2 +4\.0 KiB`, out.next(t))
	assert.Regexp(t, `^3 +1 B`, out.next(t))
	select {
	case code := <-done:
		assert.Equal(t, 0, code, errOut.String())
	case <-time.After(cliWait):
		t.Fatal("watch did not stop after --count 2")
	}
}
