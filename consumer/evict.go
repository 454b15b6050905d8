package consumer

import (
	"context"
	"log/slog"
	"time"
)

// evictLoop evicts nodes silent for longer than Config.NodeTTL, by the
// worker's clock, until ctx ends. Each sweep that evicts logs one line with
// the count, however many nodes it evicted.
func (w *Worker) evictLoop(ctx context.Context) {
	ttl := w.cfg.NodeTTL
	period := min(max(ttl/4, 10*time.Millisecond), 5*time.Second)
	t := w.cfg.Clock.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C():
			w.evictSweep(now.Add(-ttl), ttl)
		}
	}
}

// evictSweep evicts the nodes whose last report is older than cutoff.
func (w *Worker) evictSweep(cutoff time.Time, ttl time.Duration) {
	evicted, res, err := w.mgr.EvictSilent(w.pubCtx, cutoff)
	for _, id := range evicted {
		w.noteNodeEpoch(id, 0, false)
	}
	if n := len(evicted); n > 0 {
		w.stats.evicted.Add(uint64(n))
		attrs := []any{slog.Int("count", n), slog.Duration("ttl", ttl)}
		if n == 1 {
			attrs = append(attrs, slog.Uint64("node_id", evicted[0]))
		}
		w.log.Info("nodes evicted: silent longer than the node TTL", attrs...)
	}
	if err != nil {
		w.logThrottled(errorLevel, "node eviction failed", slog.Any("err", err))
	}
	w.in.changed(res)
}
