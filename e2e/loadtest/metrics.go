package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// counters are the worker's counters from its /metrics.
type counters struct {
	received      uint64 // flowstate_reports_received_total
	applied       uint64 // flowstate_reports_applied_total
	rejected      uint64 // flowstate_reports_rejected_total, every reason
	dropped       uint64 // flowstate_slow_consumer_dropped_total
	publishErrors uint64 // flowstate_publish_errors_total
	reconnects    uint64 // flowstate_nats_reconnects_total
	chunksSent    uint64 // flowstate_chunks_sent_total
	conflicts     uint64 // flowstate_node_write_conflicts_total

	heapInuse uint64 // go_memstats_heap_inuse_bytes, a gauge
}

// sub returns the counts from b to c, and c's gauges.
func (c counters) sub(b counters) counters {
	return counters{
		received:      c.received - b.received,
		applied:       c.applied - b.applied,
		rejected:      c.rejected - b.rejected,
		dropped:       c.dropped - b.dropped,
		publishErrors: c.publishErrors - b.publishErrors,
		reconnects:    c.reconnects - b.reconnects,
		chunksSent:    c.chunksSent - b.chunksSent,
		conflicts:     c.conflicts - b.conflicts,
		heapInuse:     c.heapInuse,
	}
}

var metricsClient = &http.Client{Timeout: 5 * time.Second}

// scrape reads the worker's counters from http://addr/metrics.
func scrape(ctx context.Context, addr string) (counters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return counters{}, err
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return counters{}, fmt.Errorf("scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return counters{}, fmt.Errorf("scrape metrics: %s", resp.Status)
	}
	fields := map[string]*uint64{}
	var c counters
	fields["flowstate_reports_received_total"] = &c.received
	fields["flowstate_reports_applied_total"] = &c.applied
	fields["flowstate_reports_rejected_total"] = &c.rejected
	fields["flowstate_slow_consumer_dropped_total"] = &c.dropped
	fields["flowstate_publish_errors_total"] = &c.publishErrors
	fields["flowstate_nats_reconnects_total"] = &c.reconnects
	fields["flowstate_chunks_sent_total"] = &c.chunksSent
	fields["flowstate_node_write_conflicts_total"] = &c.conflicts
	fields["go_memstats_heap_inuse_bytes"] = &c.heapInuse
	seen := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		p, ok := fields[name]
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return c, fmt.Errorf("scrape metrics: %q: %w", line, err)
		}
		*p += uint64(v) // rejected has one line per reason
		seen[name] = true
	}
	if err := sc.Err(); err != nil {
		return c, fmt.Errorf("scrape metrics: %w", err)
	}
	for _, name := range []string{"flowstate_reports_applied_total", "flowstate_slow_consumer_dropped_total"} {
		if !seen[name] {
			return c, fmt.Errorf("scrape metrics: no %s", name)
		}
	}
	return c, nil
}
