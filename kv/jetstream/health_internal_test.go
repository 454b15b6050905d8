package jetstream

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
)

// TestUnavailableCountsNoPeersForPlacement: a bucket of three replicas
// created while a cluster is still forming is refused with 400 "no
// suitable peers for placement", which passes once the servers are up; a
// worker starting then waits for it, as for any unavailability.
func TestUnavailableCountsNoPeersForPlacement(t *testing.T) {
	noPeers := &natsjs.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}
	assert.True(t, unavailable(fmt.Errorf("create bucket: %w", noPeers)))
	assert.True(t, unavailable(&natsjs.APIError{Code: 503, ErrorCode: 10008}))
	assert.False(t, unavailable(&natsjs.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}))
}

// TestUnavailableCountsTheOlderAPIsAnswers: the store reads a key's last
// write from the stream's leader with nats.go's older JetStream API
// (leaderSeqOf), whose errors are its own types. While a cluster elects
// (a server of it just restarted) that read is answered "JetStream system
// temporarily unavailable", which a worker starting then must wait out as
// it does the newer API's; a request JetStream refuses must still fail.
func TestUnavailableCountsTheOlderAPIsAnswers(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&nats.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{&nats.APIError{Code: 500, ErrorCode: 10118, Description: "stream is offline"}, true},
		{&nats.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement"}, true},
		{nats.ErrStreamNotFound, true},
		{nats.ErrJetStreamNotEnabled, true},
		{&nats.APIError{Code: 400, ErrorCode: 10003, Description: "bad request"}, false},
		{&nats.APIError{Code: 400, ErrorCode: 10071, Description: "wrong last sequence: 5"}, false},
	} {
		err := fmt.Errorf("read __flow/epoch: %w", tc.err)
		assert.Equal(t, tc.want, unavailable(err), "%v", tc.err)
	}
}
