package main

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// publishFor publishes the reports k = from, from+1, ... of p round-robin,
// fire and forget, from start until d has passed: as fast as the connection
// takes them when rate is 0, else at rate reports/s. It returns the next k.
func publishFor(ctx context.Context, nc *nats.Conn, p *payloads, from uint64, start time.Time, d time.Duration, rate float64) (uint64, error) {
	if rate > 0 {
		return publishPaced(ctx, nc, p, from, start, d, rate)
	}
	k := from
	for {
		if (k-from)%256 == 0 {
			if err := ctx.Err(); err != nil {
				return k, err
			}
			if time.Since(start) >= d {
				return k, nil
			}
		}
		subject, body := p.at(k)
		if err := nc.Publish(subject, body); err != nil {
			return k, err
		}
		k++
	}
}

// pacerTick is how often the paced publisher wakes up; pacerBurst bounds the
// catching up after a late wake-up, in time at the target rate.
const (
	pacerTick  = time.Millisecond
	pacerBurst = 20 * time.Millisecond
)

// publishPaced is publishFor at rate reports/s: a token bucket filled at
// rate, emptied in a batch at every tick.
func publishPaced(ctx context.Context, nc *nats.Conn, p *payloads, from uint64, start time.Time, d time.Duration, rate float64) (uint64, error) {
	tick := time.NewTicker(pacerTick)
	defer tick.Stop()
	burst := max(rate*pacerBurst.Seconds(), 1)
	tokens, last := 1.0, start
	k := from
	for {
		now := time.Now()
		if now.Sub(start) >= d {
			return k, nil
		}
		tokens = min(tokens+rate*now.Sub(last).Seconds(), burst)
		last = now
		for ; tokens >= 1; tokens-- {
			subject, body := p.at(k)
			if err := nc.Publish(subject, body); err != nil {
				return k, err
			}
			k++
		}
		select {
		case <-ctx.Done():
			return k, ctx.Err()
		case <-tick.C:
		}
	}
}
