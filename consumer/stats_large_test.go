package consumer_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

// A stats view too large for one message is answered 413 from its length:
// the worker allocates nothing like the document to refuse it (rendered,
// the JSON of this one takes 900 kB).
func TestAStatsViewTooLargeForOneMessageIsRefusedBeforeItIsRendered(t *testing.T) {
	const maxPayload = 512 << 10
	f := startWorker(t, startServer(t, &server.Options{MaxPayload: maxPayload}), consumer.Config{PublishInterval: consumer.DefaultPublishInterval})
	for node := uint64(1); node <= 3; node++ { // 3 reports of 300 kB, each within the max payload
		h := flowstate.Health{HasLastErrors: true}
		for id := range flowstate.FlowID(100) {
			errs := make([]flowstate.FlowError, flowstate.MaxFlowErrors)
			for k := range errs {
				errs[k] = flowstate.FlowError{Time: int64(k), Message: strings.Repeat("m", 1000)}
			}
			h.Flows = append(h.Flows, flowstate.FlowHealth{ID: flowstate.FlowID(node)*1000 + id, Has: flowstate.HasLastErrors, LastErrors: errs})
		}
		ack(t, f.nc, node, codec.AppendReport(nil, &codec.Report{NodeID: node, Health: h}))
	}
	for _, accept := range []string{protocol.ContentTypeJSON, ""} {
		req := nats.NewMsg("flow.state.get")
		req.Header.Set(protocol.HeaderView, protocol.ViewStats)
		if accept != "" {
			req.Header.Set(protocol.HeaderAccept, accept)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		msg, err := f.nc.RequestMsg(req, wait)
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		assert.Equal(t, "413", msg.Header.Get("Nats-Service-Error-Code"), accept)
		assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(450<<10), "%q: bytes allocated to refuse it", accept)
	}
}
