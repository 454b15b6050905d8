package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/protocol"
)

// rawResult is the ceiling of NATS itself: the same reports to a subscriber
// that only counts them.
type rawResult struct {
	published uint64
	counted   uint64 // reports the subscriber received
	dropped   uint64 // reports its client library dropped as a slow consumer
	elapsed   time.Duration
	usage     usage // CPU time of nats-server, this program and the machine meanwhile
}

func (r rawResult) rate() float64 { return float64(r.counted) / r.elapsed.Seconds() }

// drainTimeout bounds the wait for a subscriber, or the worker, to catch up
// with what was published.
const drainTimeout = 2 * time.Minute

// measureRaw publishes sc's reports round-robin for d, as fast as possible,
// to a counting queue subscriber on its own connection, then a marker on a
// subject the subscription matches: when the marker arrives, everything
// published before it has arrived or been dropped. No worker may be
// subscribed meanwhile.
func measureRaw(ctx context.Context, natsProc *process, url string, sc scenario, d time.Duration) (rawResult, error) {
	subConn, err := connect(url, "loadtest-raw-sub")
	if err != nil {
		return rawResult{}, err
	}
	defer subConn.Close()
	marker := prefix + ".heartbeat.end"
	var counted uint64 // owned by the subscription's goroutine until done
	done := make(chan time.Time, 1)
	sub, err := subConn.QueueSubscribe(prefix+".heartbeat.*", "loadtest-raw", func(m *nats.Msg) {
		if m.Subject == marker {
			select {
			case done <- time.Now():
			default: // a marker sent again
			}
			return
		}
		counted++
	})
	if err != nil {
		return rawResult{}, err
	}
	// The worker's own limits, so that both drop at the same backlog.
	if err := sub.SetPendingLimits(consumer.DefaultPendingMsgs, consumer.DefaultPendingBytes); err != nil {
		return rawResult{}, err
	}
	if err := subConn.FlushTimeout(startTimeout); err != nil {
		return rawResult{}, err
	}
	pubConn, err := connect(url, "loadtest-raw-pub")
	if err != nil {
		return rawResult{}, err
	}
	defer pubConn.Close()

	u0, err := readUsage(0, natsProc.pid())
	if err != nil {
		return rawResult{}, err
	}
	g, err := newPublisher(pubConn, sc, d, 0, 0)
	if err != nil {
		return rawResult{}, err
	}
	start := time.Now()
	res := g.Run(ctx)
	if res.FirstError != nil {
		return rawResult{}, res.FirstError
	}
	k := res.Sent
	if err := pubConn.FlushTimeout(drainTimeout); err != nil {
		return rawResult{}, fmt.Errorf("flush: %w", err)
	}
	if err := pubConn.Publish(marker, nil); err != nil {
		return rawResult{}, err
	}
	if err := pubConn.FlushTimeout(drainTimeout); err != nil {
		return rawResult{}, fmt.Errorf("flush: %w", err)
	}
	deadline := time.Now().Add(drainTimeout)
	for {
		select {
		case end := <-done:
			u1, err := readUsage(0, natsProc.pid())
			dropped, _ := sub.Dropped()
			return rawResult{published: k, counted: counted, dropped: uint64(dropped), elapsed: end.Sub(start), usage: u1.sub(u0)}, err
		case <-ctx.Done():
			return rawResult{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return rawResult{}, errors.New("raw: the end marker did not arrive within " + drainTimeout.String())
		}
		// Nothing pending and no marker: it was dropped with a full backlog.
		if n, _, err := sub.Pending(); err == nil && n == 0 {
			if err := pubConn.Publish(marker, nil); err != nil {
				return rawResult{}, err
			}
		}
	}
}

// prefix is the worker's subject prefix: the default.
const prefix = protocol.DefaultPrefix

// connect opens a client connection that fails instead of reconnecting.
func connect(url, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.NoReconnect(), nats.Timeout(startTimeout))
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	return nc, nil
}
