package consumer

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Stats counts what a Worker has done since it started.
type Stats struct {
	Received uint64 // heartbeat messages taken from the subscription
	Applied  uint64 // reports merged into the state
	Acked    uint64 // acknowledgements sent for reports sent as requests
	Rejected uint64 // reports rejected, for any reason
	// RejectedByReason splits Rejected by reason: the codec's error kinds,
	// "subject_mismatch", "bad_subject", "capacity" (507, a capacity
	// limit), "unavailable" and "store" for store failures,
	// "shutting_down".
	RejectedByReason map[string]uint64
	// RequestErrors counts the get and nodes requests that failed, by
	// "<endpoint>/<reason>" (for example "get/too_large", "nodes/store",
	// "get/respond" for a reply that could not be sent).
	RequestErrors map[string]uint64
	Published     uint64 // aggregates published on <prefix>.state
	PublishErrors uint64 // aggregates that could not be published (too large, connection closed)
	Gets          uint64 // get requests answered with the aggregate
	GetErrors     uint64 // get requests answered with an error
	Dropped       uint64 // heartbeats the client library dropped as a slow consumer
	Evicted       uint64 // nodes evicted for silence (Config.NodeTTL)
	// EndpointOverflows counts the times a get or nodes endpoint's queue
	// was full (Config.EndpointPendingMsgs) and the client library dropped
	// requests: once per episode, not per request (the library does not
	// say how many). Dropped requests time out at their senders.
	EndpointOverflows uint64
	// DroppedAtShutdown counts the reports received but not applied when
	// Shutdown's apply budget ran out: dropped unanswered; each node's
	// next heartbeat heals the state.
	DroppedAtShutdown uint64

	// Protocol v2.
	DeltasPublished uint64 // deltas published on <prefix>.state.delta, resyncs included
	DeltaResyncs    uint64 // of which resync deltas (Flow-State-Resync: 1)
	DeltaBytes      int    // body size of the last delta published
	ChunkedGets     uint64 // gets answered in chunks (Flow-State-Chunks: 1)
	ChunksSent      uint64 // chunks sent answering them

	// The state now.
	Revision       uint64 // current revision
	Nodes, Flows   int    // nodes and flows in the aggregate
	ErrorBytes     int    // bytes of error messages the nodes' health holds (protocol v3, --max-error-bytes)
	Errors         int    // errors the nodes' health holds (protocol v3, --max-errors)
	AggregateBytes int    // size of the msgpack aggregate at the last get or update, fitting the max payload or not
}

// counters are a Worker's live Stats.
type counters struct {
	received, applied, acked, rejected atomic.Uint64
	published, publishErrors           atomic.Uint64
	gets, getErrors                    atomic.Uint64
	evicted                            atomic.Uint64
	endpointOverflows, droppedAtStop   atomic.Uint64
	aggregateBytes                     atomic.Int64
	deltas, deltaResyncs               atomic.Uint64
	deltaBytes                         atomic.Int64
	chunkedGets, chunksSent            atomic.Uint64

	mu            sync.Mutex // guards byReason and requestErrors
	byReason      map[string]uint64
	requestErrors map[string]uint64
}

func (c *counters) reject(reason string) {
	c.rejected.Add(1)
	c.mu.Lock()
	if c.byReason == nil {
		c.byReason = make(map[string]uint64)
	}
	c.byReason[reason]++
	c.mu.Unlock()
}

// requestError counts a failed get or nodes request.
func (c *counters) requestError(endpoint, reason string) {
	if endpoint == endpointGet {
		c.getErrors.Add(1)
	}
	c.mu.Lock()
	if c.requestErrors == nil {
		c.requestErrors = make(map[string]uint64)
	}
	c.requestErrors[endpoint+"/"+reason]++
	c.mu.Unlock()
}

func (c *counters) snapshot() Stats {
	c.mu.Lock()
	byReason := maps.Clone(c.byReason)
	requestErrors := maps.Clone(c.requestErrors)
	c.mu.Unlock()
	if byReason == nil {
		byReason = map[string]uint64{}
	}
	if requestErrors == nil {
		requestErrors = map[string]uint64{}
	}
	return Stats{
		Received:          c.received.Load(),
		Applied:           c.applied.Load(),
		Acked:             c.acked.Load(),
		Rejected:          c.rejected.Load(),
		RejectedByReason:  byReason,
		RequestErrors:     requestErrors,
		Published:         c.published.Load(),
		PublishErrors:     c.publishErrors.Load(),
		Gets:              c.gets.Load(),
		GetErrors:         c.getErrors.Load(),
		Evicted:           c.evicted.Load(),
		EndpointOverflows: c.endpointOverflows.Load(),
		DroppedAtShutdown: c.droppedAtStop.Load(),
		AggregateBytes:    int(c.aggregateBytes.Load()),
		DeltasPublished:   c.deltas.Load(),
		DeltaResyncs:      c.deltaResyncs.Load(),
		DeltaBytes:        int(c.deltaBytes.Load()),
		ChunkedGets:       c.chunkedGets.Load(),
		ChunksSent:        c.chunksSent.Load(),
	}
}
