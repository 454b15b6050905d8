package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/protocol"
)

// One prefix, one state (PROTOCOL.md): every worker names its state in its
// micro service's metadata, and looks for the other workers of its prefix
// at start-up and every prefixCheckInterval. Two workers share a state only
// on one JetStream bucket; any other pair (a memory worker beside any
// other, two buckets) would split the reports between two states. At
// start-up such a worker exits 1; at run time the later started of the two
// stops consuming, turns not ready and exits 1. A worker whose metadata
// names no backend (an older version) is counted and warned about, never
// judged: it may be a JetStream worker of this bucket in a rolling upgrade.

// Bounds of the prefix check.
const (
	prefixCheckInterval = 5 * time.Second        // between two looks, ±20% jitter
	discoverWait        = time.Second            // most time a look gathers replies
	discoverQuiet       = 250 * time.Millisecond // a look ends this long after the last reply
	maxSeenServices     = 1024                   // services remembered as reported, then forgotten
)

// The metadata of the micro service that names a worker's state.
const (
	metaBackend = "backend"   // memory or jetstream
	metaBucket  = "bucket"    // the JetStream bucket, with jetstream
	metaStarted = "started"   // when the worker started, unix nanoseconds
	metaWorker  = "worker_id" // host-pid-random, as in the publisher lease
)

// peer is a worker as its service info describes it.
type peer struct {
	service string    // micro service id
	worker  string    // worker id
	backend string    // memory or jetstream; "" if it does not say (an older worker)
	bucket  string    // with jetstream
	started time.Time // zero if it does not say
}

// metadata is what p publishes in its service info.
func (p peer) metadata() map[string]string {
	m := map[string]string{metaBackend: p.backend, metaStarted: strconv.FormatInt(p.started.UnixNano(), 10), metaWorker: p.worker}
	if p.backend == "jetstream" {
		m[metaBucket] = p.bucket
	}
	return m
}

// state names p's state: "memory", or "jetstream, bucket flow_state".
func (p peer) state() string {
	if p.backend == "jetstream" {
		return "jetstream, bucket " + p.bucket
	}
	return p.backend
}

func (p peer) String() string {
	return fmt.Sprintf("worker %s (%s; service %s)", clip(p.worker), clip(p.state()), clip(p.service))
}

// sharesState reports whether p and q serve one state: one JetStream bucket.
func (p peer) sharesState(q peer) bool {
	return p.backend == "jetstream" && q.backend == "jetstream" && p.bucket == q.bucket
}

// startedAfter reports whether p started after q: of two workers with
// different states, the one that leaves. Equal start times are ordered by
// worker id, then service id, so that both workers agree on one.
func (p peer) startedAfter(q peer) bool {
	if !p.started.Equal(q.started) {
		return p.started.After(q.started)
	}
	if p.worker != q.worker {
		return p.worker > q.worker
	}
	return p.service > q.service
}

// advice says what to do about a worker other that serves this prefix
// with another state than self.
func advice(self, other peer) string {
	if self.backend == "jetstream" && other.backend == "jetstream" {
		return fmt.Sprintf("workers on two buckets hold two states: give --kv-bucket %s to share its state, or another --prefix", clip(other.bucket))
	}
	return "a memory worker holds a state of its own, so the reports would be split between two states: " +
		"give every worker of the prefix --kv jetstream and one --kv-bucket to share one state, or give this one another --prefix"
}

// prefixWatch looks for the other workers of the prefix.
type prefixWatch struct {
	nc     *nats.Conn
	up     <-chan struct{} // closed once the connection is up for the first time
	prefix string
	self   peer        // service is set once the worker's service runs
	clock  clock.Clock // the looks' cadence; the started times compared
	log    *slog.Logger

	conflict  atomic.Bool   // the last look found another state
	conflicts atomic.Uint64 // workers with another state found, each once
	unknown   atomic.Int64  // workers of the prefix that name no backend, at the last look
	leaving   atomic.Pointer[error]

	// Used by one look at a time.
	seen   map[string]bool // services already counted and logged
	silent bool            // the last look had no answer at all
	looked bool            // a look was made at start-up
}

func newPrefixWatch(nc *natsConn, prefix string, self peer, clk clock.Clock, log *slog.Logger) *prefixWatch {
	return &prefixWatch{nc: nc.Conn, up: nc.up, prefix: prefix, self: self, clock: clk, log: log.With(slog.String("prefix", prefix)), seen: map[string]bool{}}
}

// errOtherState is wrapped by the error of a worker that does not serve
// beside another state.
var errOtherState = errors.New("another state serves this prefix")

// atStart is the check before the worker consumes: an error naming a
// worker of the prefix with another state, if there is one.
func (p *prefixWatch) atStart(ctx context.Context) error {
	p.looked = true
	others := p.look(ctx)
	if len(others) == 0 {
		return nil
	}
	o := others[0]
	return fmt.Errorf("%w (%q): %s, which started %s before this one; %s",
		errOtherState, p.prefix, o, p.clock.Since(o.started).Round(time.Millisecond), advice(p.self, o))
}

// Run looks every prefixCheckInterval while connected, and returns an
// error once this worker must leave: it is not ready from then on. A worker
// that could not look at start-up (not connected yet) looks as soon as its
// connection is up.
func (p *prefixWatch) Run(ctx context.Context) error {
	if !p.looked {
		select {
		case <-ctx.Done():
			return nil
		case <-p.up:
		}
		if err := p.once(ctx); err != nil {
			return err
		}
	}
	t := p.clock.NewTimer(jitter(prefixCheckInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		if p.nc.IsConnected() {
			if err := p.once(ctx); err != nil {
				return err
			}
		}
		t.Reset(jitter(prefixCheckInterval))
	}
}

// Stop does nothing: the watch ends with Run.
func (p *prefixWatch) Stop(context.Context) error { return nil }

// once looks, and decides: this worker leaves if a worker with another
// state started before it.
func (p *prefixWatch) once(ctx context.Context) error {
	for _, o := range p.look(ctx) {
		if !p.self.startedAfter(o) {
			continue // o leaves; logged by look
		}
		err := fmt.Errorf("%w (%q): %s started before this one; this worker stops consuming and exits; %s",
			errOtherState, p.prefix, o, advice(p.self, o))
		p.leaving.Store(&err)
		p.log.Error("another state serves this prefix: this worker started later, so it stops consuming and exits",
			slog.String("other", o.String()), slog.String("self", p.self.String()))
		return err
	}
	return nil
}

// notServing is the reason this worker stopped serving, or nil.
func (p *prefixWatch) notServing() error {
	if err := p.leaving.Load(); err != nil {
		return *err
	}
	return nil
}

// look finds the workers of the prefix with another state than this one,
// earliest first; it counts and logs each new one, and those that name no
// backend.
func (p *prefixWatch) look(ctx context.Context) []peer {
	peers, answered, err := discover(ctx, p.nc, p.self.service)
	if err != nil {
		p.log.Warn("cannot look for the other workers of the prefix", slog.Any("err", err))
		return nil
	}
	if !answered {
		// Not even this worker's own service, nor the server's "no
		// responders": the look went nowhere.
		if !p.silent {
			p.log.Warn("no answer to "+infoSubject()+": cannot tell whether another state serves this prefix; the server is slow, or the worker's NATS user may not publish "+infoSubject()+" or subscribe to _INBOX.>",
				slog.Duration("waited", discoverWait))
		}
		p.silent = true
		return nil
	}
	p.silent = false
	if len(p.seen) > maxSeenServices {
		clear(p.seen)
	}
	var others []peer
	unknown := 0
	for _, o := range peers {
		if o.prefix != p.prefix {
			continue
		}
		switch {
		case o.backend == "":
			unknown++
			if !p.seen[o.service] {
				p.seen[o.service] = true
				p.log.Warn("a worker of this prefix does not say which state it serves (an older version); it is not checked: upgrade it",
					slog.String("service", clip(o.service)))
			}
		case !p.self.sharesState(o.peer):
			others = append(others, o.peer)
			if p.seen[o.service] {
				continue
			}
			p.seen[o.service] = true
			p.conflicts.Add(1)
			if p.self.service != "" && !p.self.startedAfter(o.peer) {
				// At start-up, or when this worker leaves, the caller says it.
				p.log.Warn("another state serves this prefix: the other worker started later, so it leaves",
					slog.String("other", o.String()), slog.String("self", p.self.String()))
			}
		}
	}
	p.unknown.Store(int64(unknown))
	p.conflict.Store(len(others) > 0)
	slices.SortFunc(others, func(a, b peer) int {
		switch {
		case a.service == b.service:
			return 0
		case a.startedAfter(b):
			return 1
		default:
			return -1
		}
	})
	return others
}

// infoSubject is where every flowstate service answers with its info.
func infoSubject() string {
	s, _ := micro.ControlSubject(micro.InfoVerb, protocol.ServiceName, "")
	return s
}

// prefixedPeer is a peer and the prefix it serves.
type prefixedPeer struct {
	peer
	prefix string
}

// serviceInfo is the part of a micro service's info a look reads.
type serviceInfo struct {
	ID       string            `json:"id"`
	Metadata map[string]string `json:"metadata"`
}

// discover asks every flowstate service for its info and returns them but
// the service skip (this worker's own), gathering replies for at most
// discoverWait, and until none came for discoverQuiet. answered is false
// when nothing answered at all, not even the server's "no responders".
func discover(ctx context.Context, nc *nats.Conn, skip string) (peers []prefixedPeer, answered bool, err error) {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishMsg(&nats.Msg{Subject: infoSubject(), Reply: inbox}); err != nil {
		return nil, false, err
	}
	deadline := time.Now().Add(discoverWait)
	wait := discoverWait
	for {
		wait = min(wait, time.Until(deadline))
		if wait <= 0 || ctx.Err() != nil {
			return peers, answered, nil
		}
		msg, err := sub.NextMsg(wait)
		switch {
		case errors.Is(err, nats.ErrTimeout):
			return peers, answered, nil
		case errors.Is(err, nats.ErrNoResponders):
			return peers, true, nil // no service at all
		case err != nil:
			return peers, answered, err
		}
		answered = true
		wait = discoverQuiet
		var info serviceInfo
		if json.Unmarshal(msg.Data, &info) != nil || info.ID == "" || info.ID == skip {
			continue
		}
		peers = append(peers, peerOf(info))
	}
}

// peerOf reads a service's info.
func peerOf(info serviceInfo) prefixedPeer {
	md := info.Metadata
	p := prefixedPeer{prefix: md["prefix"], peer: peer{service: info.ID, worker: md[metaWorker], backend: md[metaBackend], bucket: md[metaBucket]}}
	switch p.backend {
	case "memory", "jetstream":
	default:
		p.backend = "" // not one this worker knows: not judged
	}
	if ns, err := strconv.ParseInt(md[metaStarted], 10, 64); err == nil {
		p.started = time.Unix(0, ns)
	}
	return p
}

// jitter is d ± 20%.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + rand.N(2*d/5)
}

// clip cuts s, read from another process, to 64 bytes for a log line.
func clip(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	return s[:most] + "…"
}
