package loadgen

import (
	"context"
	"fmt"
	"time"

	"github.com/flowstate-io/flowstate/codec"
)

// lane sends, in Acked mode, the reports of nodes lane, lane+lanes, ... in
// turn, one at a time, each when the schedule lets it. Replies are awaited
// even after ctx ends.
func (r *run) lane(ctx context.Context, lane, lanes int) {
	g := r.g
	bg := context.WithoutCancel(ctx)
	var scratch []byte
	var rep codec.Report
	var timer *time.Timer
	for i := lane; ; i += lanes {
		if i >= g.cfg.Nodes {
			i = lane
		}
		at, ok := r.due()
		if !ok || !wait(ctx, &timer, at) || r.over(time.Now()) {
			return
		}
		n := &g.nodes[i]
		body := g.p.body(&scratch, &rep, i, n.sent)
		n.sent++
		r.sent.Add(1)
		t0 := time.Now()
		if err := g.request(bg, g.p.subjects[i], body); err != nil {
			n.last = failed
			r.fail(err)
			continue
		}
		r.lat.Record(time.Since(t0))
		r.acked.Add(1)
		n.known, n.last = n.sent, handled
	}
}

// wait waits until at, reusing *timer; false when ctx ended first.
func wait(ctx context.Context, timer **time.Timer, at time.Time) bool {
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err() == nil
	}
	if *timer == nil {
		*timer = time.NewTimer(d)
	} else {
		(*timer).Reset(d)
	}
	select {
	case <-ctx.Done():
		(*timer).Stop()
		return false
	case <-(*timer).C:
		return true
	}
}

// pacerTick is how often Publish mode wakes up when paced: each time, it
// sends what the schedule says is due, so a late wake-up sends the backlog
// at once.
const pacerTick = time.Millisecond

// publish sends, in Publish mode, the reports of the round-robin (node
// next mod Nodes) from one goroutine until the run is over. It counts
// locally and shares the count every 256 reports, to stay as cheap as a
// bare loop of Publish.
func (r *run) publish(ctx context.Context) {
	g := r.g
	var scratch []byte
	var rep codec.Report
	var tick *time.Ticker
	if r.every > 0 {
		tick = time.NewTicker(pacerTick)
		defer tick.Stop()
	}
	i := int(g.next % uint64(g.cfg.Nodes))
	var sent uint64
	defer func() {
		r.sent.Store(sent)
		g.next += sent
	}()
	for ; r.limit == 0 || sent < r.limit; sent++ {
		if sent%256 == 0 {
			r.sent.Store(sent)
			if ctx.Err() != nil || r.over(time.Now()) {
				return
			}
		}
		if tick != nil {
			at := r.start.Add(time.Duration(sent) * r.every)
			if r.over(at) {
				return
			}
			for time.Until(at) > 0 {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}
		n := &g.nodes[i]
		if err := g.nc.Publish(g.p.subjects[i], g.p.body(&scratch, &rep, i, n.sent)); err != nil {
			r.fail(fmt.Errorf("loadgen: publish on %s: %w", g.p.subjects[i], err))
			return
		}
		n.sent++
		n.last = published
		if i++; i == g.cfg.Nodes {
			i = 0
		}
	}
}
