package jetstream

import (
	"fmt"
	"testing"

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
