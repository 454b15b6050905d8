// Package consumer connects the flow state manager to NATS: it applies the
// heartbeat reports that flownodes publish, publishes the aggregate to
// frontends and answers their gets, as PROTOCOL.md describes.
//
// A Worker holds one queue-group subscription on <prefix>.heartbeat.*. The
// NATS client delivers its messages to one goroutine, in arrival order, and
// the Worker applies each one there before it takes the next: reports are
// never applied in parallel. A report sent as a request is acknowledged only
// once it has been applied, so a get that follows the ack sees it.
//
// After a report that changed the aggregate, the Worker publishes the
// aggregate on <prefix>.state, coalesced to one update per PublishInterval:
// the first change after a quiet interval goes out at once, later changes go
// out together at the end of the interval, and the last state is always
// published. The aggregate key of the store is written at the same cadence.
//
// The get endpoint (<prefix>.state.get) is an endpoint of the NATS micro
// service "flowstate", so $SRV.PING, $SRV.INFO and $SRV.STATS discover it.
// Gets are served from an encoding cached per state version.
package consumer
