package main

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestWarnsWhenTheAggregateCanOutgrowOneMessage: with --kv jetstream, a
// --max-total-flows under which the aggregate's JSON can pass the server's
// max payload is named at start-up, with the flow count where that happens
// and the server setting that raises it.
func TestWarnsWhenTheAggregateCanOutgrowOneMessage(t *testing.T) {
	var logs bytes.Buffer
	m := &Main{Log: slog.New(slog.NewTextHandler(&logs, nil))}
	for _, tc := range []struct {
		maxTotalFlows int
		warns         bool
	}{
		{100_000, true}, // the default, on the default 1 MB max payload
		{0, true},       // no limit
		{13_000, false},
	} {
		logs.Reset()
		m.Config.MaxTotalFlows = tc.maxTotalFlows
		m.warnAggregateSize(1 << 20)
		if !tc.warns {
			assert.Empty(t, logs.String(), "--max-total-flows %d", tc.maxTotalFlows)
			continue
		}
		for _, want := range []string{"level=WARN", "flows=13107", "max_payload=1048576", "raise max_payload in the nats-server configuration"} {
			assert.Contains(t, logs.String(), want, "--max-total-flows %d", tc.maxTotalFlows)
		}
	}
}
