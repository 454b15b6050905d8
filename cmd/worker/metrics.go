package main

import (
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/kv/jetstream"
	"github.com/flowstate-io/flowstate/state"
)

// statsCollector exposes a worker's counters and its connection's state as
// Prometheus metrics, read when scraped.
type statsCollector struct {
	worker *consumer.Worker
	nc     *nats.Conn
	js     *jetstream.Store // nil unless --kv jetstream
	mgr    *state.Replica   // with a shared store, or nil
	events *natsEvents      // the connection's disconnections, or nil
	flowsC *flowsCollector  // per-flow metrics (--metrics-flows), or nil
	prefix *prefixWatch     // the other workers of the prefix, or nil
	// readiness is what /readyz answers from; nil: the worker's own.
	readiness func() error
	// maxErrorBytes and maxErrors are --max-error-bytes and --max-errors;
	// 0: not exported.
	maxErrorBytes, maxErrors int
	// build is what flowstate_build_info says, read once.
	build buildInfo

	received, applied, acked, rejected *prometheus.Desc
	published, publishErrors           *prometheus.Desc
	gets, getErrors, dropped           *prometheus.Desc
	connected, reconnects, info        *prometheus.Desc
	evicted, revision, nodes, flows    *prometheus.Desc
	aggregateBytes                     *prometheus.Desc
	errorBytes, maxErrorBytesDesc      *prometheus.Desc
	errors, maxErrorsDesc              *prometheus.Desc
	storeAvailable, publisher          *prometheus.Desc
	storeRestartNeeded                 *prometheus.Desc
	storeRefused, aggregateKeyCurrent  *prometheus.Desc
	storeForgets                       *prometheus.Desc
	writeConflicts                     *prometheus.Desc
	aggregateJSONBytes                 *prometheus.Desc
	ready, disconnects, slowDropped    *prometheus.Desc
	deltas, deltaResyncs, deltaBytes   *prometheus.Desc
	chunkedGets, chunksSent            *prometheus.Desc
	prefixConflict, prefixConflicts    *prometheus.Desc
	prefixUnknown                      *prometheus.Desc
	oldestUnanswered, unanswered       *prometheus.Desc
}

func newStatsCollector(w *consumer.Worker, nc *nats.Conn, js *jetstream.Store, mgr *state.Replica) *statsCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("flowstate_"+name, help, labels, nil)
	}
	return &statsCollector{
		worker:            w,
		nc:                nc,
		js:                js,
		mgr:               mgr,
		build:             readBuildInfo(),
		received:          d("reports_received_total", "Heartbeat messages taken from the subscription."),
		applied:           d("reports_applied_total", "Reports merged into the state."),
		acked:             d("acks_total", "Acknowledgements sent for reports sent as requests."),
		rejected:          d("reports_rejected_total", "Reports rejected, by reason.", "reason"),
		published:         d("publishes_total", "Aggregates published on the state subject."),
		publishErrors:     d("publish_errors_total", "Aggregates that could not be published."),
		gets:              d("gets_total", "Get requests answered with the aggregate."),
		getErrors:         d("get_errors_total", "Get requests answered with an error."),
		dropped:           d("slow_consumer_dropped_total", "Heartbeats dropped by the client library as a slow consumer."),
		connected:         d("nats_connected", "1 while the NATS connection is up."),
		reconnects:        d("nats_reconnects_total", "NATS reconnections."),
		info:              d("build_info", "The worker's build: its version, the commit it was built from, whether the tree had changes, and the Go version.", "version", "commit", "modified", "goversion"),
		evicted:           d("nodes_evicted_total", "Nodes evicted for silence (--node-ttl)."),
		revision:          d("revision", "Current revision of the state."),
		nodes:             d("nodes", "Nodes in the aggregate."),
		flows:             d("flows", "Flows in the aggregate."),
		aggregateBytes:    d("aggregate_bytes", "Size of the msgpack encoding of the aggregate at the last get or update, whether it fits the max payload or not."),
		errorBytes:        d("error_bytes", "Bytes of error messages (protocol v3 last_errors) the state holds over all nodes, as --max-error-bytes counts them."),
		maxErrorBytesDesc: d("max_error_bytes", "--max-error-bytes: the most bytes of error messages the state holds; a report that would take flowstate_error_bytes past it is rejected (507, reason capacity)."),
		errors:            d("errors", "Errors (protocol v3 last_errors) the state holds over all nodes, as --max-errors counts them."),
		maxErrorsDesc:     d("max_errors", "--max-errors: the most errors the state holds; a report that would take flowstate_errors past it is rejected (507, reason capacity)."),
		storeAvailable:    d("store_available", "1 while the JetStream bucket takes writes (--kv jetstream)."),
		storeRestartNeeded: d("store_server_restart_needed", "Per server of the bucket's stream (--kv jetstream, --kv-replicas above 1): 1 while the stream's leader has not heard from its replica for --kv-replica-silence, or has again but it has not caught up; "+
			"the server is down, cut off, or its JetStream store failed a write (a full disk), after which it stays behind until it is restarted.", "server"),
		publisher:           d("publisher", "1 while this worker holds the publisher lease of a shared bucket (--kv jetstream)."),
		aggregateKeyCurrent: d("aggregate_key_current", "On the publisher of a shared bucket (--kv jetstream): 1 while __flow/state holds the aggregate, 0 while it is deleted because the aggregate's JSON does not fit the connection's max payload."),
		aggregateJSONBytes:  d("aggregate_json_bytes", "On the publisher of a shared bucket (--kv jetstream): the size of the aggregate's JSON (the value of __flow/state) at its last write, whether it fit or not."),
		storeForgets:        d("store_forgets_total", "Times this worker found that the shared bucket no longer held a write its watch had applied (a server's store restored from an older copy, or a power loss before its lazy fsync), and moved to a new epoch that keeps what the bucket holds (--kv jetstream)."),
		storeRefused:        d("store_refused_total", "Values of the shared bucket applied as no value (the node absent), by reason: invalid (not a FlowStateValue, or v3 fields a report could not carry); and keys under the node prefix ignored: key (--kv jetstream).", "reason"),
		writeConflicts:      d("node_write_conflicts_total", "Reports answered 503 because the bucket refused their node-key write: the node's key had a later write than this worker had applied when it sent it (the node's report through another worker, or a write of this worker whose outcome was unknown), and the write, sent again each time this worker's watch had passed the write that beat it, was still refused 2 s (the apply timeout) after its first refusal; nothing was stored (--kv jetstream)."),
		ready:               d("ready", "1 while the worker serves (what /readyz answers 200 for)."),
		disconnects:         d("nats_disconnects_total", "Unexpected NATS disconnections, by cause: server_closed (the server closed the connection without a word: a slow consumer, or a server that stops), stale, other.", "cause"),
		deltas:              d("deltas_published_total", "Deltas published on the delta subject (protocol v2), resync deltas included."),
		deltaResyncs:        d("delta_resyncs_total", "Resync deltas published: deltas that tell clients to take a snapshot."),
		deltaBytes:          d("delta_bytes", "Body size of the last delta published."),
		chunkedGets:         d("chunked_gets_total", "Get requests answered in chunks (Flow-State-Chunks: 1)."),
		chunksSent:          d("chunks_sent_total", "Chunks sent answering chunked gets."),
		prefixConflict:      d("prefix_conflict", "1 while the last look found a worker of this prefix with another state (a memory worker, or another bucket)."),
		prefixConflicts:     d("prefix_conflicts_total", "Workers of this prefix with another state found, each counted once."),
		prefixUnknown:       d("prefix_unknown_workers", "Workers of this prefix that do not say which state they serve (older versions), at the last look."),
		oldestUnanswered: d("oldest_unanswered_report_seconds", "How long the oldest report this worker took and has not answered yet has waited, on the worker's clock; 0 when every report taken is answered. "+
			"Past the apply timeout plus 5 s (7 s) the worker is not ready: its answers are stalled."),
		unanswered:  d("unanswered_reports", "Reports this worker took and has not answered yet (with --kv jetstream at most --kv-window and the one waiting for a place; with --kv memory at most one)."),
		slowDropped: d("nats_slow_consumer_disconnects_total", "Disconnections of the worker by the embedded NATS server because the worker was a slow consumer (an external server's show as nats_disconnects_total{cause=\"server_closed\"})."),
	}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

// collectEvents sends the connection's disconnections, the worker's
// readiness and the per-flow metrics.
func (c *statsCollector) collectEvents(ch chan<- prometheus.Metric) {
	ready := c.worker.Ready
	if c.readiness != nil {
		ready = c.readiness
	}
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, bit(ready() == nil))
	if p := c.prefix; p != nil {
		ch <- prometheus.MustNewConstMetric(c.prefixConflict, prometheus.GaugeValue, bit(p.conflict.Load()))
		ch <- prometheus.MustNewConstMetric(c.prefixConflicts, prometheus.CounterValue, float64(p.conflicts.Load()))
		ch <- prometheus.MustNewConstMetric(c.prefixUnknown, prometheus.GaugeValue, float64(p.unknown.Load()))
	}
	if c.events != nil {
		byCause, slow := c.events.counts()
		for cause, n := range byCause {
			ch <- prometheus.MustNewConstMetric(c.disconnects, prometheus.CounterValue, float64(n), cause)
		}
		ch <- prometheus.MustNewConstMetric(c.slowDropped, prometheus.CounterValue, float64(slow))
	}
	if c.flowsC != nil {
		c.flowsC.Collect(ch)
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.worker.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.received, s.Received)
	counter(c.applied, s.Applied)
	counter(c.acked, s.Acked)
	for reason, n := range s.RejectedByReason {
		counter(c.rejected, n, reason)
	}
	counter(c.published, s.Published)
	counter(c.publishErrors, s.PublishErrors)
	counter(c.gets, s.Gets)
	counter(c.getErrors, s.GetErrors)
	counter(c.dropped, s.Dropped)
	ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, bit(c.nc.IsConnected()))
	counter(c.reconnects, c.nc.Stats().Reconnects)
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, c.build.Version, c.build.Commit, c.build.modifiedLabel(), c.build.Go)
	counter(c.evicted, s.Evicted)
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	gauge(c.revision, float64(s.Revision))
	gauge(c.nodes, float64(s.Nodes))
	gauge(c.flows, float64(s.Flows))
	gauge(c.aggregateBytes, float64(s.AggregateBytes))
	gauge(c.errorBytes, float64(s.ErrorBytes))
	if c.maxErrorBytes > 0 {
		gauge(c.maxErrorBytesDesc, float64(c.maxErrorBytes))
	}
	gauge(c.errors, float64(s.Errors))
	if c.maxErrors > 0 {
		gauge(c.maxErrorsDesc, float64(c.maxErrors))
	}
	counter(c.deltas, s.DeltasPublished)
	counter(c.deltaResyncs, s.DeltaResyncs)
	gauge(c.deltaBytes, float64(s.DeltaBytes))
	counter(c.chunkedGets, s.ChunkedGets)
	counter(c.chunksSent, s.ChunksSent)
	age, waiting := c.worker.OldestUnanswered()
	gauge(c.oldestUnanswered, age.Seconds())
	gauge(c.unanswered, float64(waiting))
	if c.js != nil {
		gauge(c.storeAvailable, bit(c.js.Available()))
		counter(c.storeForgets, c.js.Forgets())
		for server, stuck := range c.js.StuckServers() {
			ch <- prometheus.MustNewConstMetric(c.storeRestartNeeded, prometheus.GaugeValue, bit(stuck), server)
		}
	}
	if c.mgr != nil {
		current, jsonBytes, publisher := c.mgr.AggregateKey()
		gauge(c.publisher, bit(publisher))
		if publisher {
			gauge(c.aggregateKeyCurrent, bit(current))
			gauge(c.aggregateJSONBytes, float64(jsonBytes))
		}
		counter(c.writeConflicts, c.mgr.Conflicts())
		refused := c.mgr.StoreRefusals()
		for _, reason := range []string{state.RefusedInvalid, state.RefusedKey} {
			counter(c.storeRefused, refused[reason], reason)
		}
	}
	c.collectEvents(ch)
}

// bit is a gauge's value of b.
func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// newMergeLatency is the histogram of the time an applied report takes.
func newMergeLatency() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "flowstate_merge_seconds",
		Help:    "Time to decode, check and merge one applied report.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 4, 10), // 1 µs .. 262 ms
	})
}
