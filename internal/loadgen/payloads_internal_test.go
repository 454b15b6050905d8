package loadgen

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/protocol"
)

func TestReportsEncodedAheadEqualThoseEncodedAsSent(t *testing.T) {
	cfg := Config{FirstNode: 5, Nodes: 3, Flows: 4}
	ahead := newPayloads(cfg, protocol.SubjectsOf("").Heartbeat)
	assert.NotNil(t, ahead.buf)
	asSent := *ahead
	asSent.buf = nil
	var scratch []byte
	var r codec.Report
	for i := range 3 {
		for round := range uint64(2 * Rounds) {
			assert.Equal(t, ahead.body(nil, nil, i, round), asSent.body(&scratch, &r, i, round), "node %d round %d", i, round)
		}
	}
	assert.Equal(t, "flow.heartbeat.7", ahead.subjects[2])
}

func TestReportsOfTooLargeALoadAreEncodedAsSent(t *testing.T) {
	cfg := Config{Nodes: 1000, Flows: 4000}
	p := newPayloads(cfg, protocol.SubjectsOf("").Heartbeat)
	assert.Nil(t, p.buf)
	assert.Greater(t, ReportSize(cfg), 4000*10)
}
